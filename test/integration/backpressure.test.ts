/**
 * `enqueue({ maxPending, onBackpressure })` against the real database: refused before anything
 * is written with the caller's transaction still usable, a warning at most once an interval,
 * one read of the published backlog a second (not one per call), the estimate when no relay
 * publishes, and the relay's own publishing.
 */
import type { PoolClient } from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { OutboxBackpressureError, OutboxValidationError } from '../../src/errors.js';
import { backpressureGate } from '../../src/producer/backpressure.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { SqlExecutor } from '../../src/producer/executor.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { logRecorder } from '../helpers/log-recorder.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

let db: TestDb;
let schema: string;
beforeAll(async () => {
  db = await createTestDb('backpressure', { partitions: 2 });
  schema = `"${db.schema}"`;
});
afterAll(async () => {
  await db?.close();
});
afterEach(() => {
  vi.useRealTimers();
});
beforeEach(async () => {
  backpressureGate.reset();
  await db.pool.query(`DELETE FROM ${schema}.events`);
  await db.pool.query(`DELETE FROM ${schema}.backlog`);
});

const event = (id: string) => ({ aggregateType: 'order', aggregateId: id, type: 'created', payload: {} });

async function published(pending: number, measuredAgo = '0 seconds'): Promise<void> {
  await db.pool.query(
    `INSERT INTO ${schema}.backlog (pending, dead, interval_ms, measured_at)
     VALUES ($1, 0, 5000, now() - $2::interval)`,
    [pending, measuredAgo],
  );
}

async function count(): Promise<number> {
  const { rows } = await db.pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${schema}.events`);
  return Number(rows[0]!.n);
}

/** The caller's client, counting the backlog reads it runs. */
function counting(tx: PoolClient): { tx: SqlExecutor; reads: () => number } {
  let reads = 0;
  return {
    tx: {
      query: (q) => {
        if (q.text.includes('.backlog')) reads += 1;
        return tx.query(q as never) as never;
      },
    },
    reads: () => reads,
  };
}

describe('enqueue backpressure', () => {
  it('throws above the ceiling before writing; the transaction stays usable', async () => {
    await published(100);
    await inTransaction(db.pool, async (tx) => {
      const error = await enqueue(tx, event('a'), { schema: db.schema, maxPending: 50 }).catch((e) => e);
      expect(error).toBeInstanceOf(OutboxBackpressureError);
      expect(error).toMatchObject({ code: 'TXO_BACKPRESSURE', retryable: true, pending: 100, ceiling: 50 });
      expect((error as OutboxBackpressureError).pendingFrom).toBe('relay');
      // Same transaction: still valid, the next statement runs and the commit commits.
      await enqueue(tx, event('b'), { schema: db.schema });
    });
    const { rows } = await db.pool.query(`SELECT aggregate_id FROM ${schema}.events`);
    expect(rows).toEqual([{ aggregate_id: 'b' }]);
  });

  it('writes below the ceiling', async () => {
    await published(10);
    await inTransaction(db.pool, (tx) => enqueue(tx, event('a'), { schema: db.schema, maxPending: 50 }));
    expect(await count()).toBe(1);
  });

  it("'warn' writes and logs once per interval", async () => {
    await published(100);
    vi.useFakeTimers({ toFake: ['Date'] });
    const { lines, logger } = logRecorder();
    for (const id of ['a', 'b', 'c']) {
      await inTransaction(db.pool, (tx) =>
        enqueue(tx, event(id), { schema: db.schema, maxPending: 50, onBackpressure: 'warn', logger }),
      );
    }
    expect(await count()).toBe(3);
    const warnings = lines.filter((l) => l.level === 'warn');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.obj).toMatchObject({
      schema: db.schema,
      pending: 100,
      maxPending: 50,
      pendingFrom: 'relay',
    });
  });

  it('reads the published backlog once a second per process, not once per call', async () => {
    await published(10);
    vi.useFakeTimers({ toFake: ['Date'] }); // the cache's clock stands still: no race with the second
    await inTransaction(db.pool, async (client) => {
      const { tx, reads } = counting(client);
      for (let i = 0; i < 5; i++) await enqueue(tx, event(`a${i}`), { schema: db.schema, maxPending: 50 });
      expect(reads()).toBe(1);
    });
    // Another transaction within the second: still no read.
    await inTransaction(db.pool, async (client) => {
      const { tx, reads } = counting(client);
      await enqueue(tx, event('b'), { schema: db.schema, maxPending: 50 });
      expect(reads()).toBe(0);
    });
    expect(await count()).toBe(6);
  });

  it('without a fresh measurement (no relay) uses the live-row estimate', async () => {
    await published(0, '1 hour');
    await inTransaction(db.pool, (tx) =>
      enqueue(tx, [event('x'), event('y'), event('z')], { schema: db.schema }),
    );
    await waitFor(
      async () => {
        const { rows } = await db.pool.query<{ live: string }>(
          `SELECT pg_stat_get_live_tuples('${schema}.events'::regclass)::text AS live`,
        );
        return Number(rows[0]!.live) === 3;
      },
      { what: 'the live-row statistics to see 3 events' },
    );
    await inTransaction(db.pool, async (tx) => {
      const error = await enqueue(tx, event('a'), { schema: db.schema, maxPending: 3 }).catch((e) => e);
      expect(error).toBeInstanceOf(OutboxBackpressureError);
      expect(error).toMatchObject({ pending: 3, pendingFrom: 'estimate' });
    });
    expect(await count()).toBe(3);
  });

  it('refuses a bad maxPending or onBackpressure at the door', async () => {
    await inTransaction(db.pool, async (tx) => {
      await expect(enqueue(tx, event('a'), { schema: db.schema, maxPending: 0 })).rejects.toThrow(
        OutboxValidationError,
      );
      await expect(
        enqueue(tx, event('a'), { schema: db.schema, maxPending: 5, onBackpressure: 'drop' as never }),
      ).rejects.toThrow(/onBackpressure/);
    });
    expect(await count()).toBe(0);
  });

  it('a running relay publishes the backlog that enqueue reads', async () => {
    const later = new Date(Date.now() + 3_600_000);
    await inTransaction(db.pool, (tx) =>
      enqueue(
        tx,
        ['a', 'b', 'c', 'd'].map((id) => ({ ...event(id), deliverAfter: later })),
        { schema: db.schema },
      ),
    );
    const relay = createRelay({
      pool: db.pool,
      publisher: new RecordingPublisher(),
      schema: db.schema,
      pollIntervalMs: 50,
      backlogIntervalMs: 1000,
    });
    await relay.start();
    try {
      await waitFor(
        async () => {
          const { rows } = await db.pool.query<{ pending: string }>(
            `SELECT pending::text FROM ${schema}.backlog`,
          );
          return rows[0]?.pending === '4';
        },
        { what: 'the relay to publish a backlog of 4' },
      );
    } finally {
      await relay.stop({ timeout: 2000 });
    }
    await inTransaction(db.pool, async (tx) => {
      const error = await enqueue(tx, event('e'), { schema: db.schema, maxPending: 4 }).catch((e) => e);
      expect(error).toMatchObject({ code: 'TXO_BACKPRESSURE', pending: 4, pendingFrom: 'relay' });
    });
  });
});
