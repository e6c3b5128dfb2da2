/**
 * Caller versions: `enqueue(tx, { …, sequence: order.version })` takes the business row's own
 * version as the event's sequence and writes no sequence row. The relay's side (a repeat, a gap)
 * is tested with the relay (test/integration/relay-sequence-faults.test.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { enqueue } from '../../src/producer/enqueue.js';
import { createTestDb, inTransaction, type TestDb } from '../helpers/db.js';

let db: TestDb;
let S: string;
beforeAll(async () => {
  db = await createTestDb('caller_versions');
  S = `"${db.schema}"`;
  await db.pool.query(`CREATE TABLE ${S}.orders (id text PRIMARY KEY, version bigint NOT NULL DEFAULT 0)`);
});
afterAll(async () => {
  await db?.close();
});

const rowsOf = async (id: string) =>
  (
    await db.pool.query(
      `SELECT sequence::int, sequence_base::int, partition FROM ${S}.events WHERE aggregate_id = $1 ORDER BY id`,
      [id],
    )
  ).rows;
const sequenceRows = async (id: string): Promise<number> =>
  Number(
    (await db.pool.query(`SELECT count(*) AS n FROM ${S}.aggregate_sequences WHERE aggregate_id = $1`, [id]))
      .rows[0].n,
  );
const options = () => ({ schema: db.schema });
const event = (id: string, sequence?: number) => ({
  aggregateType: 'order',
  aggregateId: id,
  type: 'order.changed',
  payload: { id },
  ...(sequence === undefined ? {} : { sequence }),
});

describe('caller versions', () => {
  it('the event takes the given version; no sequence row is written', async () => {
    const result = await inTransaction(db.pool, (tx) => enqueue(tx, event('v1', 1), options()));
    expect(result.sequence).toBe(1);
    const batch = await inTransaction(db.pool, (tx) =>
      enqueue(tx, [event('v1', 2), event('v1', 3)], options()),
    );
    expect(batch.map((r) => r.sequence)).toEqual([2, 3]);
    expect((await rowsOf('v1')).map((r) => [r.sequence, r.sequence_base])).toEqual([
      [1, 0],
      [2, 0],
      [3, 0],
    ]);
    expect(await sequenceRows('v1')).toBe(0);
  });

  it('under the caller’s row lock, concurrent writers give one aggregate its versions in commit order', async () => {
    await db.pool.query(`INSERT INTO ${S}.orders (id) VALUES ('locked')`);
    await Promise.all(
      Array.from({ length: 6 }, () =>
        (async () => {
          for (let i = 0; i < 10; i++) {
            await inTransaction(db.pool, async (tx) => {
              const { rows } = await tx.query(
                `UPDATE ${S}.orders SET version = version + 1 WHERE id = 'locked' RETURNING version::int`,
              );
              await enqueue(tx, event('locked', rows[0].version), options());
            });
          }
        })(),
      ),
    );
    expect((await rowsOf('locked')).map((r) => r.sequence)).toEqual(
      Array.from({ length: 60 }, (_, i) => i + 1),
    );
  });

  it('a rolled-back transaction leaves nothing', async () => {
    await expect(
      inTransaction(db.pool, async (tx) => {
        await enqueue(tx, event('rb', 1), options());
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    expect(await rowsOf('rb')).toEqual([]);
  });

  it.each([
    [0, 'is 0'],
    [-3, 'is -3'],
    [1.5, 'is 1.5'],
    [2 ** 53, `is ${2 ** 53}`],
    [Number.NaN, 'is NaN'],
    ['7' as unknown as number, 'is a string'],
    [7n as unknown as number, 'is a bigint'],
  ])('refuses sequence %s at the door', async (sequence, problem) => {
    const error = await inTransaction(db.pool, (tx) => enqueue(tx, event('bad', sequence), options())).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).field).toBe('event.sequence');
    expect((error as Error).message).toContain(problem);
    expect(await rowsOf('bad')).toEqual([]);
  });

  it.each([
    ['a repeat', [event('b', 4), event('b', 4)], 'events[1].sequence', 'is 4 after 4 (events[0])'],
    ['a gap', [event('b', 4), event('b', 6)], 'events[1].sequence', 'pass 5'],
    ['a step back', [event('b', 4), event('b', 3)], 'events[1].sequence', 'is 3 after 4'],
    ['a version after none', [event('b'), event('b', 2)], 'events[1].sequence', 'is given, but events[0]'],
    ['none after a version', [event('b', 2), event('x'), event('b')], 'events[2].sequence', 'is missing'],
  ])('refuses %s within one call, writing none of it', async (_what, events, field, text) => {
    const error = await inTransaction(db.pool, (tx) => enqueue(tx, events, options())).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).field).toBe(field);
    expect((error as Error).message).toContain(text);
    expect(await rowsOf('b')).toEqual([]);
    expect(await rowsOf('x')).toEqual([]);
  });

  it('one call may hold versioned and sequenced aggregates; results keep the order given', async () => {
    const results = await inTransaction(db.pool, (tx) =>
      enqueue(
        tx,
        [event('m-seq'), event('m-ver', 7), event('m-seq'), event('m-ver', 8), event('m-one', 1)],
        options(),
      ),
    );
    expect(results.map((r) => r.sequence)).toEqual([1, 7, 2, 8, 1]);
    expect((await rowsOf('m-ver')).map((r) => r.sequence)).toEqual([7, 8]);
    expect((await rowsOf('m-seq')).map((r) => r.sequence)).toEqual([1, 2]);
    expect(await sequenceRows('m-ver')).toBe(0);
    expect(await sequenceRows('m-seq')).toBe(1);
  });

  it('an aggregate lands in one partition whichever path wrote it, and where the formula before 009 put it', async () => {
    const keys = ['a', 'ü-ß', '42', 'order with spaces', 'x'.repeat(250), '😀', 'nb\u00a0sp'];
    for (const [i, id] of keys.entries()) {
      await inTransaction(db.pool, async (tx) => {
        await enqueue(tx, event(`s-${i}-${id}`), options());
        await enqueue(tx, [event(`s-${i}-${id}`), event(`s-${i}-${id}`)], options());
        await enqueue(tx, event(`v-${i}-${id}`, 1), options());
        await enqueue(tx, [event(`v-${i}-${id}`, 2), event(`v-${i}-${id}`, 3)], options());
      });
    }
    const { rows } = await db.pool.query(
      `SELECT aggregate_id, array_agg(DISTINCT partition) AS parts,
              ((hashtextextended(min(aggregate_type) || chr(31) || aggregate_id, 0) & 9223372036854775807)
                 % (SELECT partitions FROM ${S}.config))::smallint AS before_009
       FROM ${S}.events WHERE aggregate_id ~ '^[sv]-' GROUP BY aggregate_id`,
    );
    expect(rows).toHaveLength(keys.length * 2);
    for (const r of rows) expect(r.parts).toEqual([r.before_009]);
  });

  it('a search_path that puts other functions first cannot move an aggregate to another partition', async () => {
    const evil = `${db.schema}_evil`;
    await db.pool.query(`DROP SCHEMA IF EXISTS "${evil}" CASCADE; CREATE SCHEMA "${evil}"`);
    try {
      // Exact-match overloads, found before pg_catalog's once the path names pg_catalog later.
      await db.pool.query(`
        CREATE FUNCTION "${evil}".hashtextextended(text, integer) RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint';
        CREATE FUNCTION "${evil}".textcat(text, text) RETURNS text LANGUAGE sql AS 'SELECT ''x''::text';
        `);
      const client = await db.pool.connect();
      try {
        await client.query(`SET search_path = "${evil}", pg_catalog, public`);
        await client.query('BEGIN');
        await enqueue(client, event('hostile-1'), options());
        await enqueue(client, [event('hostile-2'), event('hostile-2')], options());
        await enqueue(client, event('hostile-3', 1), options());
        await client.query('COMMIT');
      } finally {
        await client.query('RESET search_path').catch(() => undefined);
        client.release();
      }
      const { rows } = await db.pool.query(
        `SELECT aggregate_id, partition,
                ((hashtextextended(aggregate_type || chr(31) || aggregate_id, 0) & 9223372036854775807)
                   % (SELECT partitions FROM ${S}.config))::smallint AS expected
         FROM ${S}.events WHERE aggregate_id LIKE 'hostile-%'`,
      );
      expect(rows).toHaveLength(4);
      // The statements run in the session's search_path (keep schemas others can write out of it,
      // as PostgreSQL advises); partition_of, a schema object every producer shares, is pinned.
      for (const r of rows) expect(r.partition).toBe(r.expected);
    } finally {
      await db.pool.query(`DROP SCHEMA IF EXISTS "${evil}" CASCADE`);
    }
  });
});
