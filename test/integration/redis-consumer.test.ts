import { randomBytes } from 'node:crypto';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Consumer, consumeRedis } from '../../src/consumers/redis.js';
import { createInbox, type InboxOptions } from '../../src/inbox/inbox.js';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';
import { redisPublisher } from '../../src/publishers/redis.js';
import { createTestDb, type TestDb, waitFor } from '../helpers/db.js';
import { appliedEffects, createEffectsTable, effectsHandler } from '../helpers/effects.js';
import { makeMessage } from '../helpers/messages.js';

const REDIS_URL = process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
// Unique per run: test files run in parallel against one shared Redis; every key starts with ROOT.
const ROOT = `txo-rcons-${randomBytes(4).toString('hex')}`;

let db: TestDb;
let redis: ReturnType<typeof createClient>;
const publishers: Publisher[] = [];
const consumers: Consumer[] = [];
let counter = 0;

beforeAll(async () => {
  db = await createTestDb('redis_consumer');
  await createEffectsTable(db);
  redis = createClient({ url: REDIS_URL });
  await redis.connect();
});

afterAll(async () => {
  await Promise.all(consumers.map((c) => c.stop()));
  await Promise.all(publishers.map((p) => p.close()));
  if (redis) {
    for await (const keys of redis.scanIterator({ MATCH: `${ROOT}*`, COUNT: 1000 }))
      if (keys.length > 0) await redis.del(keys);
    await redis.close();
  }
  await db?.close();
});

interface Setup {
  readonly stream: string;
  readonly group: string;
  readonly consumerName: string;
  readonly publish: (...messages: OutboxMessage[]) => Promise<void>;
  readonly consume: (
    inbox?: Partial<InboxOptions>,
    extra?: { signal?: AbortSignal; claimIdleMs?: number },
  ) => Promise<Consumer>;
  readonly applied: () => Promise<Array<{ event_id: string; aggregate_id: string; sequence: number }>>;
  readonly pending: () => Promise<number>;
}

async function setup(): Promise<Setup> {
  counter += 1;
  const stream = `${ROOT}:s${counter}`;
  const group = `g${counter}`;
  const consumerName = `redis-${ROOT}-${counter}`;
  const publisher = redisPublisher({ url: REDIS_URL, dedupWindowSeconds: 0, stream: () => stream });
  publishers.push(publisher);
  const handler = effectsHandler(db, consumerName);
  return {
    stream,
    group,
    consumerName,
    async publish(...messages) {
      const outcomes = await publisher.publish(messages, new AbortController().signal);
      expect(outcomes.every((o) => o.ok)).toBe(true);
    },
    async consume(inbox = {}, extra = {}) {
      const consumer = await consumeRedis({
        inbox: createInbox({ pool: db.pool, consumer: consumerName, schema: db.schema, ...inbox }),
        handler,
        url: REDIS_URL,
        stream,
        group,
        consumerName: 'c1',
        concurrency: 4,
        blockMs: 200,
        claimIdleMs: 150,
        ...extra,
      });
      consumers.push(consumer);
      return consumer;
    },
    applied: () => appliedEffects(db, consumerName),
    async pending() {
      const reply = (await redis.sendCommand(['XPENDING', stream, group])) as [number, ...unknown[]];
      return Number(reply[0]);
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

describe('consumeRedis', () => {
  it('applies every event exactly once, even when the same event is appended twice', async () => {
    const s = await setup();
    const once = makeMessage({ aggregateId: 'a', sequence: 1 });
    const other = makeMessage({ aggregateId: 'b', sequence: 1 });
    await s.publish(once, other);
    await s.publish(once);
    expect(await redis.xLen(s.stream)).toBe(3);
    await s.consume();
    await waitFor(async () => (await s.applied()).length >= 2 && (await s.pending()) === 0, {
      what: 'all entries acked',
    });
    await new Promise((r) => setTimeout(r, 300));
    const applied = await s.applied();
    expect(applied.map((r) => r.event_id).sort()).toEqual([once.eventId, other.eventId].sort());
    expect(await s.pending()).toBe(0);
  });

  it('strict: a sequence delivered before its predecessor stays pending and is applied after it (XAUTOCLAIM)', async () => {
    // The first event seen of an aggregate starts it: seq 1 first, then seq 3 before seq 2.
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
      what: 'sequence 3 deferred and claimed again',
    });
    expect((await s.applied()).map((r) => r.sequence)).toEqual([1]);
    expect(await s.pending()).toBe(1);
    await s.publish(m2);
    await waitFor(async () => (await s.applied()).length === 3 && (await s.pending()) === 0, {
      what: 'the aggregate applied in order',
    });
    expect((await s.applied()).map((r) => r.sequence)).toEqual([1, 2, 3]);
  });

  it('quarantines an event of an unaccepted schema version and acks it', async () => {
    const s = await setup();
    const v2 = makeMessage({ aggregateId: 'q', sequence: 1, schemaVersion: 2 });
    const ok = makeMessage({ aggregateId: 'r', sequence: 1 });
    await s.publish(v2, ok);
    await s.consume({ accepts: [{ type: 'order.created', schemaVersion: 1 }] });
    await waitFor(async () => (await s.applied()).length === 1 && (await s.pending()) === 0, {
      what: 'both handled',
    });
    await new Promise((r) => setTimeout(r, 400)); // several claim intervals: nothing comes back
    const { rows } = await db.pool.query(
      `SELECT event_id, reason FROM "${db.schema}".inbox_quarantine WHERE consumer = $1`,
      [s.consumerName],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].event_id).toBe(v2.eventId);
    expect(rows[0].reason).toMatch(/schema version 2/);
    expect(await s.pending()).toBe(0);
    expect((await s.applied()).map((r) => r.event_id)).toEqual([ok.eventId]);
  });

  it('acknowledges an entry without an envelope (logged) instead of retrying it', async () => {
    const s = await setup();
    await redis.xAdd(s.stream, '*', { foo: 'bar', payload: '{}' });
    await s.publish(makeMessage({ aggregateId: 'e', sequence: 1 }));
    await s.consume();
    await waitFor(async () => (await s.applied()).length === 1 && (await s.pending()) === 0, {
      what: 'both settled',
    });
  });

  it('recovers entries left pending by a dead consumer', async () => {
    const s = await setup();
    const m = makeMessage({ aggregateId: 'd', sequence: 1 });
    await s.publish(m);
    // A consumer that read the entry and died before acknowledging it.
    await redis.sendCommand(['XGROUP', 'CREATE', s.stream, s.group, '0']);
    await redis.sendCommand([
      'XREADGROUP',
      'GROUP',
      s.group,
      'dead',
      'COUNT',
      '10',
      'STREAMS',
      s.stream,
      '>',
    ]);
    expect(await s.pending()).toBe(1);
    await s.consume();
    await waitFor(async () => (await s.applied()).length === 1 && (await s.pending()) === 0, {
      what: 'the entry claimed and applied',
    });
  });

  it('stop() drains, is idempotent and reads nothing afterwards; an aborted signal stops too', async () => {
    const s = await setup();
    const consumer = await s.consume({}, { claimIdleMs: 30_000 });
    await s.publish(makeMessage({ aggregateId: 's', sequence: 1 }));
    await waitFor(async () => (await s.applied()).length === 1, { what: 'first applied' });
    const started = Date.now();
    await Promise.all([consumer.stop(), consumer.stop()]);
    await consumer.stop();
    expect(Date.now() - started).toBeLessThan(1000);
    await s.publish(makeMessage({ aggregateId: 's', sequence: 2 }));
    await new Promise((r) => setTimeout(r, 400));
    expect(await s.applied()).toHaveLength(1);

    const controller = new AbortController();
    const second = await s.consume({}, { signal: controller.signal });
    await waitFor(async () => (await s.applied()).length === 2 && (await s.pending()) === 0, {
      what: 'resumed',
    });
    controller.abort();
    await second.stop();
    await s.publish(makeMessage({ aggregateId: 's', sequence: 3 }));
    await new Promise((r) => setTimeout(r, 400));
    expect(await s.applied()).toHaveLength(2);
  });
});
