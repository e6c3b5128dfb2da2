/**
 * The RabbitMQ publisher tests' broker side: an admin connection, a namespace's exchange and
 * queue, and reading what arrived. Every namespace has its own exchange and queue (random
 * suffix): test files run in parallel. One admin connection per test file (module state).
 */
import { randomBytes } from 'node:crypto';
import amqp, { type Channel, type ChannelModel, type ConsumeMessage, type Options } from 'amqplib';
import { CloudEvent } from 'cloudevents';
import { fromEnvelope } from '../../src/inbox/message.js';
import type { OutboxMessage } from '../../src/publishers/contract.js';
import { previousEnvelopeHeaders } from '../../src/testing/envelopes.js';
import type { ReceivedMessage } from '../../src/testing/index.js';

export const HOST = process.env['RABBITMQ_HOST'] ?? '127.0.0.1';
export const PORT = Number(process.env['RABBITMQ_PORT'] ?? 5672);
export const url = (host: string, port: number): string => `amqp://guest:guest@${host}:${port}`;
export const RABBITMQ_URL = url(HOST, PORT);

export const exchangeOf = (ns: string): string => `txo-${ns}`;
export const queueOf = (ns: string): string => `txo-${ns}`;
export const topicOf = (ns: string): string => `${ns}.event`;

let admin: ChannelModel | undefined;
/** Namespaces whose exchange and queue {@link closeAdmin} deletes. */
export const created = new Set<string>();

/** Opens this file's admin connection (in `beforeAll`). */
export async function openAdmin(): Promise<ChannelModel> {
  admin = await amqp.connect(RABBITMQ_URL);
  admin.on('error', () => undefined);
  return admin;
}

/** Deletes every namespace created, then closes the admin connection (in `afterAll`). */
export async function closeAdmin(): Promise<void> {
  for (const ns of created) await cleanup(ns).catch(() => undefined);
  await admin?.close();
  admin = undefined;
}

export function adminConnection(): ChannelModel {
  if (admin === undefined) throw new Error('openAdmin() first');
  return admin;
}

/** Runs `fn` on a fresh channel of the admin connection (a refused operation closes its channel). */
export async function withChannel<T>(fn: (channel: Channel) => Promise<T>): Promise<T> {
  const channel = await adminConnection().createChannel();
  channel.on('error', () => undefined);
  try {
    return await fn(channel);
  } finally {
    await channel.close().catch(() => undefined);
  }
}

/** A durable topic exchange and a durable queue bound to it for the namespace's topic. */
export async function topology(ns: string, queueArguments?: Record<string, unknown>): Promise<void> {
  created.add(ns);
  await withChannel(async (ch) => {
    await ch.assertExchange(exchangeOf(ns), 'topic', { durable: true });
    await ch.assertQueue(queueOf(ns), { durable: true, arguments: queueArguments });
    await ch.bindQueue(queueOf(ns), exchangeOf(ns), topicOf(ns));
  });
}

export async function cleanup(ns: string): Promise<void> {
  await withChannel(async (ch) => {
    await ch.deleteQueue(queueOf(ns));
    await ch.deleteExchange(exchangeOf(ns));
  });
}

/**
 * Every message in the namespace's queue, in queue order, once `expected` arrived (or after
 * 10 s). Non-destructive: the messages are left unacknowledged and requeued on close.
 */
export async function readQueue(ns: string, expected: number): Promise<ConsumeMessage[]> {
  return withChannel(async (ch) => {
    const got: ConsumeMessage[] = [];
    let enough: () => void = () => undefined;
    const arrived = new Promise<void>((resolve) => {
      enough = resolve;
    });
    await ch.consume(queueOf(ns), (m) => {
      if (m === null) return;
      got.push(m);
      if (got.length >= expected) enough();
    });
    if (expected === 0) enough();
    await Promise.race([arrived, sleep(10_000)]);
    await sleep(100); // anything beyond `expected` that is already on its way
    return got;
  });
}

/**
 * A message as the publisher contract checks it: every header as a string, named as on the
 * wire, the AMQP `content-type` property under `content-type`, and the CloudEvent the AMQP
 * binding decodes (the `cloudEvents_` or `cloudEvents:` application properties with the prefix
 * stripped, `datacontenttype` from the content-type property) validated strictly by the SDK.
 */
export function received(m: ConsumeMessage): ReceivedMessage {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(m.properties.headers ?? {})) headers[k] = String(v);
  if (typeof m.properties.contentType === 'string') headers['content-type'] = m.properties.contentType;
  const envelope = fromEnvelope(headers, m.content);
  return {
    eventId: String(m.properties.messageId ?? envelope.eventId),
    aggregateId: envelope.aggregateId,
    sequence: envelope.sequence,
    headers,
    payload: m.content,
    cloudEvent: amqpCloudEvent(m),
  };
}

/** The AMQP binding's binary-mode decoding (§3.1.1, §3.1.3), then a strict SDK CloudEvent. */
export function amqpCloudEvent(m: ConsumeMessage): Record<string, unknown> {
  const attributes: Record<string, unknown> = {};
  const separators = new Set<string>();
  for (const [name, value] of Object.entries(m.properties.headers ?? {})) {
    const match = /^cloudEvents([_:])(.+)$/.exec(name);
    if (match === null) continue;
    separators.add(match[1]!);
    if (typeof value !== 'string') throw new Error(`${name} is not an AMQP string: ${typeof value}`);
    attributes[match[2]!] = value;
  }
  // §3.1.3.1: "Any single message MUST use the same separator for all CloudEvents attributes".
  if (separators.size !== 1) throw new Error(`separators ${[...separators].join(' ')}`);
  if ('datacontenttype' in attributes)
    throw new Error('datacontenttype belongs in the content-type property');
  if (typeof m.properties.contentType === 'string') attributes['datacontenttype'] = m.properties.contentType;
  return { ...new CloudEvent(attributes, true) };
}

/** The AMQP properties tx-outbox 0.1 published `m` with (`git show d7da17d:src/publishers/rabbitmq/wire.ts`). */
export function previousProperties(m: OutboxMessage, source = 'contract'): Options.Publish {
  return {
    persistent: true,
    mandatory: true,
    messageId: m.eventId,
    contentType: m.contentType,
    type: m.type,
    timestamp: Math.floor(m.createdAt.getTime() / 1000),
    headers: previousEnvelopeHeaders(m, source),
  };
}

export async function queueDepth(ns: string): Promise<number> {
  return withChannel(async (ch) => (await ch.checkQueue(queueOf(ns))).messageCount);
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export function newNamespace(): string {
  return `r${randomBytes(4).toString('hex')}`;
}
