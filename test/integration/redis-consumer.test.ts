import { randomBytes } from 'node:crypto';
import { createClient, type RedisArgument } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Consumer, consumeRedis } from '../../src/consumers/redis.js';
import { envelopeHeaders } from '../../src/envelope/bindings.js';
import { createInbox, type InboxOptions } from '../../src/inbox/inbox.js';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';
import { PAYLOAD_FIELD, redisPublisher } from '../../src/publishers/redis/index.js';
import { previousEnvelopeHeaders } from '../../src/testing/index.js';
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
  const publisher = redisPublisher({ url: REDIS_URL, dedupWindowMs: 0, destination: () => stream });
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

describe('consumeRedis', () => {
  it('reads the entries of a relay still on 0.1 (ce-* fields) between current ones, in order', async () => {
    const s = await setup();
    await s.consume({ ordering: 'strict' });
    const id = ' 50%41 café ';
    const previous = async (m: OutboxMessage): Promise<void> => {
      const args: RedisArgument[] = ['XADD', s.stream, '*'];
      const envelope = previousEnvelopeHeaders(m, 'tx-outbox');
      for (const field in envelope) args.push(field, envelope[field]!);
      await redis.sendCommand([...args, PAYLOAD_FIELD, Buffer.from(m.payload)]);
    };
    await previous(makeMessage({ aggregateId: 'old-1', sequence: 1 }));
    await s.publish(makeMessage({ aggregateId: 'old-1', sequence: 2 }));
    await previous(makeMessage({ aggregateId: 'old-1', sequence: 3 }));
    await s.publish(makeMessage({ aggregateId: id, sequence: 1 }));
    await waitFor(async () => (await s.applied()).length === 4 && (await s.pending()) === 0, {
      what: 'every entry applied',
    });
    const applied = await s.applied();
    expect(applied.filter((e) => e.aggregate_id === 'old-1').map((e) => e.sequence)).toEqual([1, 2, 3]);
    expect(applied.filter((e) => e.aggregate_id === id).map((e) => e.sequence)).toEqual([1]);
  });

  it('acknowledges without handling an entry that repeats an envelope field (two aggregate ids)', async () => {
    const s = await setup();
    await s.consume({ ordering: 'none' });
    const m = makeMessage({ aggregateId: 'A', sequence: 1 });
    const args: RedisArgument[] = ['XADD', s.stream, '*'];
    const envelope = envelopeHeaders(m, 'tx-outbox', 'redis');
    for (const field in envelope) args.push(field, envelope[field]!);
    await redis.sendCommand([...args, 'aggregateid', 'B', PAYLOAD_FIELD, Buffer.from(m.payload)]);
    await s.publish(makeMessage({ aggregateId: 'C', sequence: 1 }));
    await waitFor(async () => (await s.applied()).length === 1 && (await s.pending()) === 0, {
      what: 'the good entry applied, the ambiguous one acknowledged',
    });
    expect((await s.applied()).map((e) => e.aggregate_id)).toEqual(['C']);
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
