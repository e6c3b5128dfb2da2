import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { natsPublisher } from '../../src/publishers/nats/index.js';
import { publisherContract, type ReceivedMessage } from '../../src/testing/index.js';
import { DATABASE_URL, NATS_URL } from '../helpers/env.js';

const broker = new URL(NATS_URL);
const streamOf = (ns: string) => `TXO_CONTRACT_${ns}`;

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
      const headers: Record<string, string> = {};
      for (const [k, v] of m.headers ?? []) headers[k] = v[0] ?? '';
      out.push({
        eventId: headers['Nats-Msg-Id'] ?? '',
        aggregateId: headers['ce-aggregateid'] ?? '',
        sequence: Number(headers['ce-sequence']),
        headers,
        payload: m.data,
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
    create: (address, ns) =>
      natsPublisher({
        url: `nats://${address.host}:${address.port}`,
        stream: streamOf(ns),
        streamSubjects: [`${ns}.>`],
        timeoutMs: 3000,
        // Reconnect through the proxy only: do not follow the server's advertised URLs.
        clientOptions: { ignoreClusterUpdates: true, reconnectTimeWait: 100 },
      }),
    topic: (ns) => `${ns}.events`,
    read,
    poison: (_ns, m) => ({ ...m, payload: Buffer.alloc(2 * 1024 * 1024, 1) }),
    cleanup: async (ns) => {
      const nc = await connect({ servers: NATS_URL });
      await (await jetstreamManager(nc)).streams.delete(streamOf(ns)).catch(() => undefined);
      await nc.close();
    },
  },
  { relay: { databaseUrl: DATABASE_URL } },
);
