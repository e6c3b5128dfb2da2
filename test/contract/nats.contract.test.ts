import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type MsgHdrs } from '@nats-io/transport-node';
import { CloudEvent } from 'cloudevents';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { natsPublisher } from '../../src/publishers/nats/index.js';
import { publisherContract, type ReceivedMessage } from '../../src/testing/index.js';
import { CONTRACT_RELAY_EVENTS, DATABASE_URL, NATS_URL } from '../helpers/env.js';

const broker = new URL(NATS_URL);
const streamOf = (ns: string) => `TXO_CONTRACT_${ns}`;

/** Every header named as on the wire, its first value. */
function headerRecord(headers: MsgHdrs | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, values] of headers ?? []) out[name] = values[0] ?? '';
  return out;
}

/**
 * The message as the CloudEvents NATS binding reads it (1.0.3, binary mode): every `ce-` header
 * is an attribute (§3.1.3.1), its value percent-decoded once (§3.1.3.2; by the platform's
 * decoder, not tx-outbox's, refusing invalid UTF-8; tx-outbox never sends quoted strings), then
 * a strict `CloudEvent` of the official SDK, which validates the names, `source`, `time` and
 * the extension values. Plain attributes, without data.
 */
function cloudEventOf(headers: Readonly<Record<string, string>>): Record<string, unknown> {
  const attributes: Record<string, string> = {};
  for (const name in headers) {
    if (name.toLowerCase().startsWith('ce-')) {
      attributes[name.slice(3).toLowerCase()] = decodeURIComponent(headers[name]!);
    }
  }
  const { data: _data, data_base64: _base64, ...event } = new CloudEvent(attributes, true).toJSON();
  return event;
}

async function read(ns: string, expected: number): Promise<ReceivedMessage[]> {
  const nc = await connect({ servers: NATS_URL });
  try {
    const jsm = await jetstreamManager(nc);
    const deadline = Date.now() + 10_000;
    let total = 0;
    while (Date.now() < deadline) {
      total = (await jsm.streams.info(streamOf(ns))).state.messages;
      if (total >= expected) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const out: ReceivedMessage[] = [];
    if (total === 0) return out;
    const messages = await (await jetstream(nc).consumers.get(streamOf(ns))).consume();
    for await (const m of messages) {
      const headers = headerRecord(m.headers);
      const cloudEvent = cloudEventOf(headers);
      out.push({
        eventId: headers['Nats-Msg-Id'] ?? '',
        aggregateId: String(cloudEvent['aggregateid']),
        sequence: Number(cloudEvent['aggregatesequence']),
        headers,
        payload: m.data,
        cloudEvent,
      });
      if (out.length >= total) break;
    }
    return out;
  } finally {
    await nc.close();
  }
}

publisherContract(
  { describe, it, expect, beforeAll, afterAll },
  {
    name: 'nats',
    features: { orderedPerKey: true, brokerDedup: true, persistent: true },
    broker: { host: broker.hostname, port: Number(broker.port || 4222) },
    create: (address, ns, options) =>
      natsPublisher({
        url: `nats://${address.host}:${address.port}`,
        stream: streamOf(ns),
        streamSubjects: [`${ns}.>`],
        timeoutMs: 3000,
        // Reconnect through the proxy only: do not follow the server's advertised URLs.
        clientOptions: { ignoreClusterUpdates: true, reconnectTimeWait: 100 },
        ...(options?.ceSource === undefined ? {} : { ceSource: options.ceSource }),
      }),
    topic: (ns) => `${ns}.events`,
    read,
    cloudEvents: true,
    poison: (_ns, m) => ({ ...m, payload: Buffer.alloc(2 * 1024 * 1024, 1) }),
    cleanup: async (ns) => {
      const nc = await connect({ servers: NATS_URL });
      await (await jetstreamManager(nc)).streams.delete(streamOf(ns)).catch(() => undefined);
      await nc.close();
    },
  },
  { relay: { databaseUrl: DATABASE_URL, events: CONTRACT_RELAY_EVENTS } },
);
