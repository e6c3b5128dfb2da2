import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enqueue } from '../../src/producer/enqueue.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';

/**
 * The race between a producer and the pruner of its aggregate's sequence row: the pruner holds
 * the row lock, the producer blocks on it, the pruner raises the floor and deletes the row and
 * commits, the producer continues. The producer must read the floor only after its wait: the
 * sequence it hands out is above everything the pruned row ever handed out.
 */
let db: TestDb;
let pruner: pg.Client;
beforeAll(async () => {
  db = await createTestDb('prune_race');
  pruner = new pg.Client({ connectionString: DATABASE_URL });
  await pruner.connect();
});
afterAll(async () => {
  await pruner?.end();
  await db?.close();
});

const write = (aggregateId: string) =>
  inTransaction(db.pool, (tx) =>
    enqueue(
      tx,
      { aggregateType: 'order', aggregateId, type: 'order.changed', payload: {} },
      { schema: db.schema },
    ),
  );

const writeMany = (aggregateIds: readonly string[]) =>
  inTransaction(db.pool, (tx) =>
    enqueue(
      tx,
      aggregateIds.map((aggregateId) => ({
        aggregateType: 'order',
        aggregateId,
        type: 'order.changed',
        payload: {},
      })),
      { schema: db.schema },
    ),
  );

/** Whether some backend of this test waits on a row lock. */
async function producerWaits(): Promise<boolean> {
  const { rows } = await db.pool.query(
    `SELECT count(*)::int AS n FROM pg_stat_activity
     WHERE datname = current_database() AND wait_event_type = 'Lock'
       AND query LIKE '%aggregate_sequences%'`,
  );
  return rows[0].n > 0;
}

/** The pruner's steps for one aggregate, with a producer let in while it holds the row. */
async function pruneWhileProducing<T>(aggregateId: string, produce: () => Promise<T>): Promise<T> {
  const s = `"${db.schema}"`;
  await pruner.query('BEGIN');
  const { rows } = await pruner.query(
    `SELECT last_sequence::int AS last FROM ${s}.aggregate_sequences
     WHERE aggregate_type = 'order' AND aggregate_id = $1 FOR UPDATE`,
    [aggregateId],
  );
  const last = rows[0].last as number;
  const produced = produce();
  await waitFor(producerWaits, { what: 'the producer to wait on the pruned row' });
  await pruner.query(
    `SELECT setval('${s}.sequence_floor', greatest($1::bigint, last_value)) FROM ${s}.sequence_floor`,
    [last],
  );
  await pruner.query(
    `DELETE FROM ${s}.aggregate_progress WHERE aggregate_type = 'order' AND aggregate_id = $1`,
    [aggregateId],
  );
  await pruner.query(
    `DELETE FROM ${s}.aggregate_sequences WHERE aggregate_type = 'order' AND aggregate_id = $1`,
    [aggregateId],
  );
  await pruner.query('COMMIT');
  return produced;
}

describe('pruning races a producer', () => {
  it('one event: the producer blocked on the pruned row continues above the floor', async () => {
    for (let i = 0; i < 5; i++) await write('race-1');
    const result = await pruneWhileProducing('race-1', () => write('race-1'));
    expect(result.sequence).toBeGreaterThan(5);
    const { rows } = await db.pool.query(
      `SELECT sequence::int, sequence_base::int FROM "${db.schema}".events WHERE event_id = $1`,
      [result.eventId],
    );
    expect(rows[0].sequence).toBe(rows[0].sequence_base + 1);
    expect(rows[0].sequence_base).toBeGreaterThanOrEqual(5);
  });

  it('a batch: every event of the pruned aggregate continues above the floor', async () => {
    for (let i = 0; i < 40; i++) await write('race-2');
    const results = await pruneWhileProducing('race-2', () =>
      writeMany(['race-0', 'race-2', 'race-2', 'race-3']),
    );
    const [, a, b] = results;
    expect(a!.sequence).toBeGreaterThan(40);
    expect(b!.sequence).toBe(a!.sequence + 1);
    const { rows } = await db.pool.query(
      `SELECT sequence::int, sequence_base::int FROM "${db.schema}".events WHERE event_id = $1`,
      [a!.eventId],
    );
    expect(rows[0].sequence).toBe(rows[0].sequence_base + 1);
  });

  it('repeatable read: the producer whose row was pruned under it fails to serialize, never reuses', async () => {
    for (let i = 0; i < 3; i++) await write('race-rr');
    const attempt = pruneWhileProducing('race-rr', () =>
      inTransaction(
        db.pool,
        (tx) =>
          enqueue(
            tx,
            { aggregateType: 'order', aggregateId: 'race-rr', type: 'order.changed', payload: {} },
            { schema: db.schema },
          ),
        'BEGIN ISOLATION LEVEL REPEATABLE READ',
      ).then(
        (r) => r,
        (error: { code?: string }) => error,
      ),
    );
    const outcome = await attempt;
    expect(outcome).toMatchObject({ code: '40001' });
    // Retried, it continues above the floor.
    expect((await write('race-rr')).sequence).toBeGreaterThan(3);
  });
});
