import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { Admin, Producer } from '@platformatic/kafka';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Consumer, consumeKafka } from '../../src/consumers/kafka.js';
import { createInbox, type Inbox, type InboxHandler, type InboxOptions } from '../../src/inbox/inbox.js';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';
import { kafkaPublisher } from '../../src/publishers/kafka.js';
import { createTestDb, type TestDb, waitFor } from '../helpers/db.js';
import { appliedEffects, createEffectsTable, effectsHandler } from '../helpers/effects.js';
import { makeMessage } from '../helpers/messages.js';

const HOST = '127.0.0.1';
const PORT = 9092;
const BROKER = `${HOST}:${PORT}`;

function portOpen(host: string, port: number, timeoutMs = 1000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (up: boolean): void => {
      socket.destroy();
      resolve(up);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

const kafkaUp = await portOpen(HOST, PORT);
if (!kafkaUp) {
  console.warn(
    `kafka-consumer.test.ts: SKIPPED, nothing listens on ${BROKER}. Start a broker with: bash scripts/kafka.sh start`,
  );
}

const suffix = randomBytes(4).toString('hex');
let db: TestDb;
let admin: Admin;
const topics: string[] = [];
const publishers: Publisher[] = [];
const consumers: Consumer[] = [];
let counter = 0;

async function setup() {
  counter += 1;
  const topic = `txo-kcons-${suffix}-${counter}`;
  const groupId = `txo-kcons-${suffix}-${counter}`;
  const consumerName = `kafka-${suffix}-${counter}`;
  topics.push(topic);
  await admin.createTopics({ topics: [topic], partitions: 3, replicas: 1 });
  const publisher = kafkaPublisher({ brokers: [BROKER], clientId: 'txo-kcons-test', topic: () => topic });
  publishers.push(publisher);
  /** Event ids handed to the inbox, in order (a redelivery shows up twice). */
  const handled: string[] = [];
  const handler = effectsHandler(db, consumerName);
  return {
    topic,
    consumerName,
    handled,
    async publish(...messages: OutboxMessage[]) {
      const outcomes = await publisher.publish(messages, new AbortController().signal);
      expect(outcomes.every((o) => o.ok)).toBe(true);
    },
    async consume(inbox: Partial<InboxOptions> = {}) {
      const real = createInbox({ pool: db.pool, consumer: consumerName, schema: db.schema, ...inbox });
      const counting = new Proxy(real, {
        get(target, property) {
          if (property === 'handle')
            return (m: Parameters<Inbox['handle']>[0], h: InboxHandler) => {
              handled.push(m.eventId);
              return target.handle(m, h);
            };
          const value = Reflect.get(target, property, target);
          return typeof value === 'function' ? value.bind(target) : value;
        },
      });
      const consumer = await consumeKafka({
        inbox: counting,
        handler,
        brokers: [BROKER],
        topic,
        groupId,
        concurrency: 4,
        deferMs: 150,
      });
      consumers.push(consumer);
      return consumer;
    },
    applied: () => appliedEffects(db, consumerName),
  };
}

describe.skipIf(!kafkaUp)(`consumeKafka on ${BROKER}`, () => {
  beforeAll(async () => {
    db = await createTestDb('kafka_consumer');
    await createEffectsTable(db);
    admin = new Admin({ clientId: 'txo-kcons-test', bootstrapBrokers: [BROKER] });
  });

  afterAll(async () => {
    await Promise.all(consumers.map((c) => c.stop()));
    await Promise.all(publishers.map((p) => p.close()));
    if (topics.length > 0) await admin?.deleteTopics({ topics }).catch(() => undefined);
    await admin?.close();
    await db?.close();
  }, 30_000);

  it('applies every event exactly once, even when the same event is published twice', async () => {
    const s = await setup();
    const once = makeMessage({ aggregateId: 'a', sequence: 1 });
    const other = makeMessage({ aggregateId: 'b', sequence: 1 });
    await s.publish(once, other);
    await s.publish(once);
    await s.consume();
    await waitFor(() => s.handled.length >= 3, { what: 'the three records handled' });
    await new Promise((r) => setTimeout(r, 300));
    const applied = await s.applied();
    expect(applied.map((r) => r.event_id).sort()).toEqual([once.eventId, other.eventId].sort());
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM "${db.schema}".inbox WHERE consumer = $1`,
      [s.consumerName],
    );
    expect(rows[0].n).toBe(2);
  }, 30_000);

  it('quarantines an event of an unaccepted schema version', async () => {
    const s = await setup();
    const v2 = makeMessage({ aggregateId: 'q', sequence: 1, schemaVersion: 2 });
    const ok = makeMessage({ aggregateId: 'r', sequence: 1 });
    await s.publish(v2, ok);
    await s.consume({ accepts: [{ type: 'order.created', schemaVersion: 1 }] });
    await waitFor(async () => (await s.applied()).length === 1, { what: 'the accepted event applied' });
    await waitFor(
      async () =>
        (
          await db.pool.query(`SELECT 1 FROM "${db.schema}".inbox_quarantine WHERE consumer = $1`, [
            s.consumerName,
          ])
        ).rowCount === 1,
      { what: 'quarantined' },
    );
    const { rows } = await db.pool.query(
      `SELECT event_id, reason FROM "${db.schema}".inbox_quarantine WHERE consumer = $1`,
      [s.consumerName],
    );
    expect(rows[0].event_id).toBe(v2.eventId);
    expect(rows[0].reason).toMatch(/schema version 2/);
    expect((await s.applied()).map((r) => r.event_id)).toEqual([ok.eventId]);
  }, 30_000);

  it('stop() drains and commits: a new consumer of the group does not reprocess committed records', async () => {
    const s = await setup();
    const first = ['s1', 's2', 's3', 's4'].map((id) => makeMessage({ aggregateId: id, sequence: 1 }));
    await s.publish(...first);
    const consumer = await s.consume();
    await waitFor(() => s.handled.length >= first.length, { what: 'first records handled' });
    await Promise.all([consumer.stop(), consumer.stop()]);
    expect((await s.applied()).length).toBe(first.length);

    const later = makeMessage({ aggregateId: 's1', sequence: 2 });
    await s.publish(later);
    const second = await s.consume();
    await waitFor(async () => (await s.applied()).length === first.length + 1, {
      what: 'the later record applied',
    });
    await new Promise((r) => setTimeout(r, 300));
    await second.stop();
    // Each record went through the inbox once: nothing committed was redelivered.
    expect([...s.handled].sort()).toEqual([...first, later].map((m) => m.eventId).sort());
  }, 40_000);

  it('strict: a deferred record is handled again after deferMs and applied after its predecessor', async () => {
    const s = await setup();
    const [m1, m2, m3] = [1, 2, 3].map((sequence) => makeMessage({ aggregateId: 'x', sequence })) as [
      OutboxMessage,
      OutboxMessage,
      OutboxMessage,
    ];
    await s.publish(m1, m3);
    await s.consume({ ordering: 'strict' });
    await waitFor(() => s.handled.filter((id) => id === m3.eventId).length >= 2, {
      what: 'sequence 3 deferred and handled again',
    });
    expect((await s.applied()).map((r) => r.sequence)).toEqual([1]);
    await s.publish(m2);
    await waitFor(async () => (await s.applied()).length === 3, { what: 'the aggregate applied in order' });
    expect((await s.applied()).map((r) => r.sequence)).toEqual([1, 2, 3]);
  }, 30_000);

  it('a record without a tx-outbox envelope is skipped and does not block the partition', async () => {
    const s = await setup();
    const producer = new Producer({ clientId: 'txo-kcons-raw', bootstrapBrokers: [BROKER] });
    try {
      await producer.send({
        messages: [{ topic: s.topic, key: Buffer.from('raw'), value: Buffer.from('{}'), partition: 0 }],
      });
    } finally {
      await producer.close();
    }
    const ok = makeMessage({ aggregateId: 'raw', sequence: 1 });
    await s.publish(ok);
    const consumer = await s.consume();
    await waitFor(async () => (await s.applied()).length === 1, { what: 'the enveloped record applied' });
    await consumer.stop();
    expect(s.handled).toEqual([ok.eventId]);
  }, 30_000);
});
