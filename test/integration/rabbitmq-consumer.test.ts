import { randomBytes } from 'node:crypto';
import amqp, { type Channel, type ChannelModel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Consumer, consumeRabbitMq } from '../../src/consumers/rabbitmq.js';
import { createInbox, type InboxOptions } from '../../src/inbox/inbox.js';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';
import { rabbitmqPublisher } from '../../src/publishers/rabbitmq.js';
import { createTestDb, type TestDb, waitFor } from '../helpers/db.js';
import { appliedEffects, createEffectsTable, effectsHandler } from '../helpers/effects.js';
import { makeMessage } from '../helpers/messages.js';

const RABBITMQ_URL = process.env['RABBITMQ_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';
// Unique per run: test files run in parallel against one shared broker.
const ROOT = `txo-rmqcons-${randomBytes(4).toString('hex')}`;

let db: TestDb;
let conn: ChannelModel;
let admin: Channel;
const queues: string[] = [];
const publishers: Publisher[] = [];
const consumers: Consumer[] = [];
let counter = 0;

beforeAll(async () => {
  db = await createTestDb('rabbitmq_consumer');
  await createEffectsTable(db);
  conn = await amqp.connect(RABBITMQ_URL);
  admin = await conn.createChannel();
});

afterAll(async () => {
  await Promise.all(consumers.map((c) => c.stop()));
  await Promise.all(publishers.map((p) => p.close()));
  for (const q of queues) await admin?.deleteQueue(q).catch(() => undefined);
  await conn?.close().catch(() => undefined);
  await db?.close();
});

interface Setup {
  readonly queue: string;
  readonly consumerName: string;
  readonly publish: (...messages: OutboxMessage[]) => Promise<void>;
  readonly consume: (inbox?: Partial<InboxOptions>, extra?: { signal?: AbortSignal }) => Promise<Consumer>;
  readonly applied: () => Promise<Array<{ event_id: string; aggregate_id: string; sequence: number }>>;
  /** Ready + unacked messages in the queue. */
  readonly remaining: () => Promise<number>;
}

async function setup(queueArgs: Record<string, unknown> = {}): Promise<Setup> {
  counter += 1;
  const queue = `${ROOT}.q${counter}`;
  const consumerName = `rabbitmq-${ROOT}-${counter}`;
  await admin.assertQueue(queue, { durable: false, arguments: queueArgs });
  queues.push(queue);
  const publisher = rabbitmqPublisher({ url: RABBITMQ_URL, exchange: '', routingKey: () => queue });
  publishers.push(publisher);
  const handler = effectsHandler(db, consumerName);
  return {
    queue,
    consumerName,
    async publish(...messages) {
      const outcomes = await publisher.publish(messages, new AbortController().signal);
      expect(outcomes.every((o) => o.ok)).toBe(true);
    },
    async consume(inbox = {}, extra = {}) {
      const consumer = await consumeRabbitMq({
        inbox: createInbox({ pool: db.pool, consumer: consumerName, schema: db.schema, ...inbox }),
        handler,
        url: RABBITMQ_URL,
        queue,
        concurrency: 4,
        deferMs: 100,
        ...extra,
      });
      consumers.push(consumer);
      return consumer;
    },
    applied: () => appliedEffects(db, consumerName),
    async remaining() {
      // A fresh channel: checkQueue on a channel only counts ready messages, so also
      // rely on `applied` + consumer stop in the tests for unacked ones.
      const { messageCount } = await admin.checkQueue(queue);
      return messageCount;
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

/** Stops the consumer and checks nothing was left unacknowledged (it would be back in the queue). */
async function stopAndCount(consumer: Consumer, s: Setup): Promise<number> {
  await consumer.stop();
  await new Promise((r) => setTimeout(r, 100));
  return s.remaining();
}

describe('consumeRabbitMq', () => {
  it('applies every event exactly once, even when the same event is published twice', async () => {
    const s = await setup();
    const once = makeMessage({ aggregateId: 'a', sequence: 1 });
    const other = makeMessage({ aggregateId: 'b', sequence: 1 });
    await s.publish(once, other);
    await s.publish(once);
    const consumer = await s.consume();
    await waitFor(async () => (await s.applied()).length >= 2, { what: 'both applied' });
    await new Promise((r) => setTimeout(r, 300));
    const applied = await s.applied();
    expect(applied.map((r) => r.event_id).sort()).toEqual([once.eventId, other.eventId].sort());
    expect(await stopAndCount(consumer, s)).toBe(0);
  });

  it('strict: a sequence delivered before its predecessor is requeued and applied after it', async () => {
    const s = await setup();
    const consumer = await s.consume({ ordering: 'strict' });
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
    await waitFor(async () => (await s.applied()).length === 3, { what: 'the aggregate applied' });
    expect((await s.applied()).map((r) => r.sequence)).toEqual([1, 2, 3]);
    expect(await stopAndCount(consumer, s)).toBe(0);
  });

  it('quarantines an event of an unaccepted schema version and acks it', async () => {
    const s = await setup();
    const v2 = makeMessage({ aggregateId: 'q', sequence: 1, schemaVersion: 2 });
    const ok = makeMessage({ aggregateId: 'r', sequence: 1 });
    await s.publish(v2, ok);
    const consumer = await s.consume({ accepts: [{ type: 'order.created', schemaVersion: 1 }] });
    await waitFor(async () => (await s.applied()).length === 1, { what: 'accepted one applied' });
    await waitFor(
      async () =>
        (
          await db.pool.query(`SELECT 1 FROM "${db.schema}".inbox_quarantine WHERE consumer = $1`, [
            s.consumerName,
          ])
        ).rowCount === 1,
      { what: 'quarantined' },
    );
    await new Promise((r) => setTimeout(r, 300));
    const { rows } = await db.pool.query(
      `SELECT event_id, reason FROM "${db.schema}".inbox_quarantine WHERE consumer = $1`,
      [s.consumerName],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].event_id).toBe(v2.eventId);
    expect(rows[0].reason).toMatch(/schema version 2/);
    expect((await s.applied()).map((r) => r.event_id)).toEqual([ok.eventId]);
    expect(await stopAndCount(consumer, s)).toBe(0);
  });

  it('rejects a message without an envelope to the dead-letter exchange', async () => {
    const dead = `${ROOT}.dead${counter + 1}`;
    await admin.assertQueue(dead, { durable: false });
    queues.push(dead);
    const s = await setup({ 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': dead });
    admin.sendToQueue(s.queue, Buffer.from('{}'), { headers: { foo: 'bar' } });
    await s.publish(makeMessage({ aggregateId: 'e', sequence: 1 }));
    const consumer = await s.consume();
    await waitFor(async () => (await s.applied()).length === 1, { what: 'the valid one applied' });
    await waitFor(async () => (await admin.checkQueue(dead)).messageCount === 1, { what: 'dead-lettered' });
    expect(await stopAndCount(consumer, s)).toBe(0);
  });

  it('stop() drains, is idempotent and reads nothing afterwards; an aborted signal stops too', async () => {
    const s = await setup();
    const consumer = await s.consume();
    await s.publish(makeMessage({ aggregateId: 's', sequence: 1 }));
    await waitFor(async () => (await s.applied()).length === 1, { what: 'first applied' });
    const started = Date.now();
    await Promise.all([consumer.stop(), consumer.stop()]);
    await consumer.stop();
    expect(Date.now() - started).toBeLessThan(1000);
    await s.publish(makeMessage({ aggregateId: 's', sequence: 2 }));
    await new Promise((r) => setTimeout(r, 400));
    expect(await s.applied()).toHaveLength(1);
    expect(await s.remaining()).toBe(1);

    const controller = new AbortController();
    const second = await s.consume({}, { signal: controller.signal });
    await waitFor(async () => (await s.applied()).length === 2, { what: 'resumed' });
    controller.abort();
    await second.stop();
    await s.publish(makeMessage({ aggregateId: 's', sequence: 3 }));
    await new Promise((r) => setTimeout(r, 400));
    expect(await s.applied()).toHaveLength(2);
    expect(await s.remaining()).toBe(1);
  });

  it('stop() waits for a delivery being handled before acking and closing', async () => {
    const s = await setup();
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    let started = false;
    const consumer = await consumeRabbitMq({
      inbox: createInbox({ pool: db.pool, consumer: s.consumerName, schema: db.schema }),
      handler: async (tx, event) => {
        started = true;
        await gate;
        await tx.query(
          `INSERT INTO "${db.schema}".effects (consumer, event_id, aggregate_id, sequence) VALUES ($1, $2, $3, $4)`,
          [s.consumerName, event.eventId, event.aggregateId, event.sequence],
        );
      },
      url: RABBITMQ_URL,
      queue: s.queue,
    });
    await s.publish(makeMessage({ aggregateId: 'd', sequence: 1 }));
    await waitFor(() => started, { what: 'handler started' });
    const stopping = consumer.stop();
    setTimeout(release, 200);
    await stopping;
    expect(await s.applied()).toHaveLength(1);
    await new Promise((r) => setTimeout(r, 100));
    expect(await s.remaining()).toBe(0);
  });
});
