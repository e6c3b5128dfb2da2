import { randomBytes } from 'node:crypto';
import amqp, { type Channel, type ChannelModel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Consumer, consumeRabbitMq } from '../../src/consumers/rabbitmq.js';
import { createInbox, type InboxOptions } from '../../src/inbox/inbox.js';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';
import { rabbitmqPublisher } from '../../src/publishers/rabbitmq/index.js';
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
  readonly consume: (
    inbox?: Partial<InboxOptions>,
    extra?: { signal?: AbortSignal; prefetch?: number; concurrency?: number },
  ) => Promise<Consumer>;
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
  const publisher = rabbitmqPublisher({ url: RABBITMQ_URL, exchange: '', destination: () => queue });
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

/** Stops the consumer and checks nothing was left unacknowledged (it would be back in the queue). */
async function stopAndCount(consumer: Consumer, s: Setup): Promise<number> {
  await consumer.stop();
  await new Promise((r) => setTimeout(r, 100));
  return s.remaining();
}

describe('consumeRabbitMq', () => {
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

  it('deferred messages go to the tail: a prefetch window full of them does not hold back the rest', async () => {
    const s = await setup();
    // Four aggregates with a gap (sequence 2 never comes): each sequence 3 is deferred, again and again.
    const gaps = ['g1', 'g2', 'g3', 'g4'].flatMap((id) => [
      makeMessage({ aggregateId: id, sequence: 1 }),
      makeMessage({ aggregateId: id, sequence: 3 }),
    ]);
    const independent = Array.from({ length: 20 }, (_, i) =>
      makeMessage({ aggregateId: `i${i}`, sequence: 1 }),
    );
    await s.publish(...gaps, ...independent);
    // Requeued at the head, the deferred ones would fill the 2-message window on every redelivery.
    const consumer = await s.consume(
      { ordering: 'strict', maxDeferrals: 10_000 },
      { prefetch: 2, concurrency: 1 },
    );
    await waitFor(async () => (await s.applied()).length === 4 + 20, {
      what: 'the independent aggregates applied past the deferred messages',
    });
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM "${db.schema}".inbox_quarantine WHERE consumer = $1`,
      [s.consumerName],
    );
    expect(rows[0].n).toBe(0);
    // Stopping hands the deferred ones back to the queue: nothing lost.
    expect(await stopAndCount(consumer, s)).toBe(4);
  });
});
