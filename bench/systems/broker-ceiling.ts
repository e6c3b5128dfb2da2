/**
 * The broker-only ceiling: how fast can this machine get N messages acknowledged by
 * JetStream with no database at all? Three loops over the same messages (the workload's
 * payloads and subjects, the same CloudEvents envelope, `Nats-Msg-Id` and expected
 * stream, so the server does the same work for each):
 *
 * - `raw`: the lean pipeline written as tightly as we can: core NATS publishes with a
 *   reply subject each, ONE wildcard subscription for the PubAcks, an ack table indexed by
 *   token, no promise or timer per message. The ceiling a relay can hope for. Its pieces are
 *   in lean-publish.ts, which the lean reference relay (lean-relay.ts) drives batch by batch.
 * - `client`: the official client's `js.publish()`, `window` publishes in flight.
 * - `publisher`: our `natsPublisher` in pipeline mode, batches of `batchSize` (1,000), one
 *   batch at a time as the relay sends them (or `batchConcurrency` at once).
 *
 * Each publishes into `ctx.stream` (subjects under `ctx.subjectPrefix`), awaits every
 * PubAck, and checks that the stream gained exactly `messages` messages. Timing runs from
 * the first publish to the last PubAck; building the payloads (rows as the database would
 * return them) and connecting are outside it.
 */
import { randomUUID } from 'node:crypto';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import {
  connect,
  createInbox,
  type Msg,
  type NatsConnection,
  type PublishOptions,
} from '@nats-io/transport-node';
import { paddedSequence } from '../../src/envelope/attributes.js';
import { envelopeHeaders } from '../../src/envelope/bindings.js';
import { percentEncode } from '../../src/envelope/percent.js';
import type { OutboxMessage } from '../../src/publishers/contract.js';
import { natsPublisher } from '../../src/publishers/nats/index.js';
import { buildHeaders } from '../../src/publishers/nats/wire.js';
import { isPubAck, RawHeaders, replyToken } from './lean-publish.js';
import type { BenchContext } from './types.js';
import { benchEvent } from './workload.js';

export type BrokerCeilingMode = 'raw' | 'client' | 'publisher';

export interface BrokerCeilingOptions {
  readonly messages: number;
  /** Approximate size of each JSON payload, in bytes. */
  readonly payloadBytes: number;
  readonly mode: BrokerCeilingMode;
  /** Aggregates the events are spread over. Default 5,000. */
  readonly aggregates?: number;
  /** `raw` and `client`: publishes awaiting their PubAck at most. Default 2,048 (raw), 1,024 (client). */
  readonly window?: number;
  /** `publisher`: messages per `publish()` call. Default 1,000. */
  readonly batchSize?: number;
  /** `publisher`: batches published at once. Default 1 (as the relay does). */
  readonly batchConcurrency?: number;
}

export interface BrokerCeilingResult {
  readonly seconds: number;
  readonly perSecond: number;
  /** CPU time (user + system) of this process per acknowledged message over the timed part, µs. */
  readonly cpuMicrosPerMessage: number;
}

/** Seconds and process CPU of the timed part of a loop. */
interface Timing {
  readonly seconds: number;
  readonly cpuMicros: number;
}

function startTiming(): () => Timing {
  const started = performance.now();
  const cpu = process.cpuUsage();
  return () => {
    const { user, system } = process.cpuUsage(cpu);
    return { seconds: (performance.now() - started) / 1000, cpuMicros: user + system };
  };
}

const SOURCE = 'tx-outbox';

export async function brokerCeiling(
  ctx: BenchContext,
  options: BrokerCeilingOptions,
): Promise<BrokerCeilingResult> {
  const messages = buildMessages(ctx, options);
  const nc = await connect({ servers: ctx.natsUrl, name: `broker-ceiling-${options.mode}` });
  try {
    const jsm = await jetstreamManager(nc);
    const before = (await jsm.streams.info(ctx.stream)).state.messages;
    let timing: Timing;
    if (options.mode === 'raw') timing = await rawPipeline(nc, ctx.stream, messages, options.window ?? 2048);
    else if (options.mode === 'client') timing = await officialClient(nc, ctx.stream, messages, options);
    else timing = await ourPublisher(nc, ctx.stream, messages, options);
    const stored = (await jsm.streams.info(ctx.stream)).state.messages - before;
    if (stored !== messages.length) {
      throw new Error(`${options.mode}: the stream gained ${stored} messages, expected ${messages.length}`);
    }
    const { seconds, cpuMicros } = timing;
    return {
      seconds,
      perSecond: messages.length / seconds,
      cpuMicrosPerMessage: cpuMicros / messages.length,
    };
  } finally {
    await nc.close();
  }
}

/** The workload's events as the relay would hand them to a publisher. */
function buildMessages(ctx: BenchContext, options: BrokerCeilingOptions): OutboxMessage[] {
  const aggregates = options.aggregates ?? 5000;
  const createdAt = new Date();
  const sequences = new Map<string, number>();
  return Array.from({ length: options.messages }, (_, i) => {
    const event = benchEvent(i, aggregates, options.payloadBytes);
    const sequence = (sequences.get(event.aggregateId) ?? 0) + 1;
    sequences.set(event.aggregateId, sequence);
    return {
      id: String(i + 1),
      eventId: randomUUID(),
      aggregateType: event.aggregateType,
      aggregateId: event.aggregateId,
      sequence,
      type: event.type,
      schemaVersion: 1,
      topic: `${ctx.subjectPrefix}.${event.subjectSuffix}`,
      payload: Buffer.from(JSON.stringify(event.payload)),
      contentType: 'application/json',
      headers: {},
      createdAt,
      attempts: 0,
    };
  });
}

/** (a) The tightest lean pipeline: the ceiling. */
async function rawPipeline(
  nc: NatsConnection,
  stream: string,
  messages: readonly OutboxMessage[],
  window: number,
): Promise<Timing> {
  const total = messages.length;
  // What a relay reads from its rows, in the shape the loop consumes (outside the timing).
  const subjects = messages.map((m) => m.topic!);
  const payloads = messages.map((m) => m.payload);
  const ids = messages.map((m) => m.eventId);
  const aggregateIds = messages.map((m) => m.aggregateId);
  const sequences = messages.map((m) => m.sequence);
  const times = messages.map((m) => m.createdAt.toISOString());
  const { type, aggregateType, contentType } = messages[0]!;
  // The NATS binding as natsPublisher writes it (envelopeHeaders(m, source, 'nats')): the same
  // headers in the same order; the per-message values percent-encoded and padded in the loop.
  const head = `NATS/1.0\r\nce-specversion: 1.0\r\nce-id: `;
  const afterId = `\r\nce-source: ${percentEncode(SOURCE)}\r\nce-type: ${percentEncode(type)}\r\nce-time: `;
  const afterTime = '\r\nce-subject: ';
  const afterSubject = `\r\nce-datacontenttype: ${percentEncode(contentType)}\r\nce-aggregatetype: ${percentEncode(aggregateType)}\r\nce-aggregateid: `;
  const afterAggregate = '\r\nce-sequence: ';
  const afterSequence = '\r\nce-aggregatesequence: ';
  const afterAggregateSequence = '\r\nce-schemaversion: 1\r\nNats-Msg-Id: ';
  const tail = `\r\nNats-Expected-Stream: ${stream}\r\n\r\n`;

  const acked = new Uint8Array(total);
  const inbox = createInbox();
  const replyPrefix = `${inbox}.`;
  const from = replyPrefix.length;
  const low = window >> 1;
  let outstanding = 0;
  let settled = 0;
  let failures = 0;
  let resume: (() => void) | undefined;
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => {
    finish = resolve;
  });
  nc.subscribe(`${inbox}.*`, {
    callback: (_error: Error | null, msg: Msg) => {
      const token = replyToken(msg.subject, from);
      if (acked[token] !== 0) return;
      acked[token] = 1;
      if (!isPubAck(msg.data)) failures += 1;
      outstanding -= 1;
      settled += 1;
      if (settled === total) finish();
      else if (resume !== undefined && outstanding <= low) {
        const go = resume;
        resume = undefined;
        go();
      }
    },
  });
  await nc.flush();

  const headers = new RawHeaders();
  const publishOptions: PublishOptions = { headers, reply: '' };
  const stop = startTiming();
  for (let i = 0; i < total; i += 1) {
    if (outstanding >= window) {
      await new Promise<void>((resolve) => {
        resume = resolve;
      });
    }
    const id = ids[i]!;
    const aggregateId = percentEncode(aggregateIds[i]!);
    const sequence = sequences[i]!;
    headers.bytes = Buffer.from(
      head +
        id +
        afterId +
        times[i] +
        afterTime +
        aggregateId +
        afterSubject +
        aggregateId +
        afterAggregate +
        paddedSequence(sequence) +
        afterSequence +
        String(sequence) +
        afterAggregateSequence +
        id +
        tail,
    );
    publishOptions.reply = replyPrefix + i.toString(36);
    nc.publish(subjects[i]!, payloads[i], publishOptions);
    outstanding += 1;
  }
  await finished;
  const timing = stop();
  if (failures > 0) throw new Error(`raw: ${failures} publishes were refused`);
  return timing;
}

/** (b) The official client: `js.publish()` with `window` publishes in flight. */
async function officialClient(
  nc: NatsConnection,
  stream: string,
  messages: readonly OutboxMessage[],
  options: BrokerCeilingOptions,
): Promise<Timing> {
  const js = jetstream(nc, { timeout: 30_000 });
  const window = options.window ?? 1024;
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < messages.length) {
      const m = messages[next++]!;
      await js.publish(m.topic!, m.payload, {
        msgID: m.eventId,
        expect: { streamName: stream },
        headers: buildHeaders(envelopeHeaders(m, SOURCE, 'nats')),
      });
    }
  };
  const stop = startTiming();
  await Promise.all(Array.from({ length: Math.min(window, messages.length) }, worker));
  return stop();
}

/** (c) Our publisher in pipeline mode, batch by batch as the relay drives it. */
async function ourPublisher(
  nc: NatsConnection,
  stream: string,
  messages: readonly OutboxMessage[],
  options: BrokerCeilingOptions,
): Promise<Timing> {
  const publisher = natsPublisher({ client: nc, stream, mode: 'pipeline', timeoutMs: 30_000 });
  const batchSize = options.batchSize ?? 1000;
  const signal = new AbortController().signal;
  let next = 0;
  let failures = 0;
  const lane = async (): Promise<void> => {
    while (next < messages.length) {
      const batch = messages.slice(next, next + batchSize);
      next += batch.length;
      const outcomes = await publisher.publish(batch, signal);
      for (const outcome of outcomes) if (!outcome.ok) failures += 1;
    }
  };
  const stop = startTiming();
  await Promise.all(Array.from({ length: options.batchConcurrency ?? 1 }, lane));
  const timing = stop();
  await publisher.close();
  if (failures > 0) throw new Error(`publisher: ${failures} publishes failed`);
  return timing;
}
