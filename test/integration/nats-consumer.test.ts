import { randomUUID } from 'node:crypto';
import { type JetStreamManager, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Consumer, consumeNats } from '../../src/consumers/nats.js';
import { createInbox, type InboxOptions } from '../../src/inbox/inbox.js';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';
import { ensureStream, natsPublisher } from '../../src/publishers/nats.js';
import { createTestDb, type TestDb, waitFor } from '../helpers/db.js';
import { appliedEffects, createEffectsTable, effectsHandler } from '../helpers/effects.js';
import { NATS_URL } from '../helpers/env.js';
import { makeMessage } from '../helpers/messages.js';
import { deleteStream } from '../helpers/nats-stream.js';

// Unique per run: test files run in parallel against one shared NATS server.
const suffix = randomUUID().slice(0, 8);
let db: TestDb;
let nc: NatsConnection;
let jsm: JetStreamManager;
const streams: string[] = [];
const publishers: Publisher[] = [];
const consumers: Consumer[] = [];
let counter = 0;

beforeAll(async () => {
  db = await createTestDb('nats_consumer');
  await createEffectsTable(db);
  nc = await connect({ servers: NATS_URL });
  jsm = await jetstreamManager(nc);
});

afterAll(async () => {
  await Promise.all(consumers.map((c) => c.stop()));
  await Promise.all(publishers.map((p) => p.close()));
  for (const s of streams) await deleteStream(NATS_URL, s);
  await nc?.close();
  await db?.close();
});

interface Setup {
  readonly stream: string;
  readonly durable: string;
  readonly subject: string;
  readonly consumerName: string;
  readonly publish: (...messages: OutboxMessage[]) => Promise<void>;
  readonly consume: (inbox?: Partial<InboxOptions>, extra?: { signal?: AbortSignal }) => Promise<Consumer>;
  readonly applied: () => Promise<Array<{ event_id: string; aggregate_id: string; sequence: number }>>;
  readonly pending: () => Promise<{ ackPending: number; pending: number; redelivered: number }>;
}

async function setup(): Promise<Setup> {
  counter += 1;
  const stream = `TXO_CONS_${suffix}_${counter}`;
  const subject = `txo-cons-${suffix}-${counter}`;
  const durable = `d${counter}`;
  const consumerName = `nats-${suffix}-${counter}`;
  streams.push(stream);
  const publisher = natsPublisher({
    servers: NATS_URL,
    stream,
    streamSubjects: [`${subject}.>`],
    duplicateWindowMs: 100,
    subject: (m) => `${subject}.${m.aggregateId}`,
  });
  publishers.push(publisher);
  await ensureStream(nc, { name: stream, subjects: [`${subject}.>`], duplicateWindowMs: 100 });
  const handler = effectsHandler(db, consumerName);
  return {
    stream,
    durable,
    subject,
    consumerName,
    async publish(...messages) {
      const outcomes = await publisher.publish(messages, new AbortController().signal);
      expect(outcomes.every((o) => o.ok)).toBe(true);
    },
    async consume(inbox = {}, extra = {}) {
      const consumer = await consumeNats({
        inbox: createInbox({ pool: db.pool, consumer: consumerName, schema: db.schema, ...inbox }),
        handler,
        servers: NATS_URL,
        stream,
        durable,
        concurrency: 4,
        deferMs: 150,
        ...extra,
      });
      consumers.push(consumer);
      return consumer;
    },
    applied: () => appliedEffects(db, consumerName),
    async pending() {
      const info = await jsm.consumers.info(stream, durable);
      return {
        ackPending: info.num_ack_pending,
        pending: info.num_pending,
        redelivered: info.num_redelivered,
      };
    },
  };
}

async function deferrals(consumer: string, eventId: string): Promise<number> {
  const { rows } = await db.pool.query(
    `SELECT coalesce(sum(attempts), 0)::int AS n FROM "${db.schema}".inbox_attempts WHERE consumer = $1 AND event_id = $2`,
    [consumer, eventId],
  );
  return rows[0].n;
}

const settled = async (s: Setup): Promise<boolean> => {
  const p = await s.pending();
  return p.ackPending === 0 && p.pending === 0;
};

describe('consumeNats', () => {
  it('applies every event exactly once, even when the same event is stored twice in the stream', async () => {
    const s = await setup();
    const once = makeMessage({ aggregateId: 'a', sequence: 1 });
    const other = makeMessage({ aggregateId: 'b', sequence: 1 });
    await s.publish(once, other);
    await new Promise((r) => setTimeout(r, 250)); // beyond the 100 ms duplicate window
    await s.publish(once);
    expect((await jsm.streams.info(s.stream)).state.messages).toBe(3);

    await s.consume();
    await waitFor(async () => (await s.applied()).length >= 2 && (await settled(s)), {
      what: 'all deliveries acked',
    });
    const applied = await s.applied();
    expect(applied.map((r) => r.event_id).sort()).toEqual([once.eventId, other.eventId].sort());
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM "${db.schema}".inbox WHERE consumer = $1`,
      [s.consumerName],
    );
    expect(rows[0].n).toBe(2);
  });

  it('strict: a sequence delivered before its predecessor is deferred (nak) and applied after it', async () => {
    // The first event seen of an aggregate starts it (a consumer may join late): seq 1 goes
    // first, then seq 3 arrives before seq 2.
    const s = await setup();
    await s.consume({ ordering: 'strict' });
    const [m1, m2, m3] = [1, 2, 3].map((sequence) => makeMessage({ aggregateId: 'x', sequence })) as [
      OutboxMessage,
      OutboxMessage,
      OutboxMessage,
    ];
    await s.publish(m1);
    await waitFor(async () => (await s.applied()).length === 1, { what: 'sequence 1' });
    await s.publish(m3);
    await waitFor(async () => (await deferrals(s.consumerName, m3.eventId)) >= 2, {
      what: 'sequence 3 deferred and redelivered',
    });
    expect((await s.applied()).map((r) => r.sequence)).toEqual([1]);
    await s.publish(m2);
    await waitFor(async () => (await s.applied()).length === 3 && (await settled(s)), {
      what: 'the aggregate applied in order',
    });
    expect((await s.applied()).map((r) => r.sequence)).toEqual([1, 2, 3]);
    expect(await deferrals(s.consumerName, m3.eventId)).toBe(0); // cleared once applied
  });

  it('quarantines an event of an unaccepted schema version and acks it (no redelivery)', async () => {
    const s = await setup();
    const v2 = makeMessage({ aggregateId: 'q', sequence: 1, schemaVersion: 2 });
    const ok = makeMessage({ aggregateId: 'r', sequence: 1 });
    await s.publish(v2, ok);
    await s.consume({ accepts: [{ type: 'order.created', schemaVersion: 1 }] });
    await waitFor(async () => (await s.applied()).length === 1 && (await settled(s)), {
      what: 'both handled',
    });
    const { rows } = await db.pool.query(
      `SELECT event_id, reason FROM "${db.schema}".inbox_quarantine WHERE consumer = $1`,
      [s.consumerName],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].event_id).toBe(v2.eventId);
    expect(rows[0].reason).toMatch(/schema version 2/);
    await new Promise((r) => setTimeout(r, 400));
    expect(await s.pending()).toEqual({ ackPending: 0, pending: 0, redelivered: 0 });
    expect((await s.applied()).map((r) => r.event_id)).toEqual([ok.eventId]);
  });

  it('terminates a message without an envelope instead of redelivering it', async () => {
    const s = await setup();
    await s.publish(makeMessage({ aggregateId: 'e', sequence: 1 }));
    const h = natsHeaders();
    h.set('x-foo', 'bar');
    await nc.request(`${s.subject}.raw`, new TextEncoder().encode('{}'), { headers: h, timeout: 5000 });
    await s.consume();
    await waitFor(async () => (await s.applied()).length === 1 && (await settled(s)), {
      what: 'both settled',
    });
    await new Promise((r) => setTimeout(r, 300));
    expect(await s.pending()).toEqual({ ackPending: 0, pending: 0, redelivered: 0 });
  });

  it('stop() drains, is idempotent, and consumes nothing afterwards; an aborted signal stops too', async () => {
    const s = await setup();
    const consumer = await s.consume();
    const first = makeMessage({ aggregateId: 's', sequence: 1 });
    await s.publish(first);
    await waitFor(async () => (await s.applied()).length === 1, { what: 'first applied' });
    await Promise.all([consumer.stop(), consumer.stop()]);
    await consumer.stop();
    const later = makeMessage({ aggregateId: 's', sequence: 2 });
    await s.publish(later);
    await new Promise((r) => setTimeout(r, 400));
    expect(await s.applied()).toHaveLength(1);
    expect((await s.pending()).pending).toBe(1);

    // A new instance of the durable consumer picks up where the first stopped.
    const controller = new AbortController();
    const second = await s.consume({}, { signal: controller.signal });
    await waitFor(async () => (await s.applied()).length === 2 && (await settled(s)), {
      what: 'resumed',
    });
    controller.abort();
    await second.stop();
    await s.publish(makeMessage({ aggregateId: 's', sequence: 3 }));
    await new Promise((r) => setTimeout(r, 300));
    expect(await s.applied()).toHaveLength(2);
  });
});
