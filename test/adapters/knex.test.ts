import knex, { type Knex } from 'knex';
import { describe, expect, it } from 'vitest';
import { enqueue, transactions } from '../../src/adapters/knex.js';
import { toKnexRaw } from '../../src/adapters/knex-bindings.js';
import { knexExecutor } from '../../src/adapters/knex-executor.js';
import { OutboxValidationError } from '../../src/errors.js';
import { DATABASE_URL } from '../helpers/env.js';
import { type AdapterHarness, adapterConformance } from './conformance.js';
import { SERIALIZABLE } from './isolation.js';
import { runnerFaults } from './runner-faults.js';

const harness: AdapterHarness<Knex.Transaction> = {
  name: 'knex',
  enqueue,
  async open(url, schema) {
    const db = knex({ client: 'pg', connection: url, pool: { min: 0, max: 8 } });
    let finished: Knex.Transaction | undefined;
    await db.transaction(async (trx) => {
      finished = trx;
    });
    return {
      transaction: (fn) => db.transaction(fn),
      async insertBusiness(tx, id, note) {
        await tx
          .withSchema(schema)
          .insert({ id, note: note ?? null })
          .into('business');
      },
      async readPrepared(tx, id) {
        // Knex passes `options` to node-postgres: a named (prepared) statement of the app's own.
        const result = await tx
          .raw(`SELECT note FROM "${schema}".business WHERE id = ?`, [id])
          .options({ name: `app_read_${schema}` });
        return (result as { rows: { note: string }[] }).rows[0]?.note;
      },
      nonTransactional: () => [db, finished, db.withSchema(schema)],
      transactions: () => transactions(db),
      close: () => db.destroy(),
    };
  },
};

adapterConformance(harness, DATABASE_URL);

describe('knex runner faults', () => {
  runnerFaults(() => {
    const db = knex({ client: 'pg', connection: DATABASE_URL, pool: { min: 0, max: 2 } });
    return { runner: transactions(db), close: () => db.destroy() };
  });
});

describe('knex bindings', () => {
  it('renumbers $n by first use: a repeated parameter stays one (one type)', () => {
    const { sql, bindings } = toKnexRaw('SELECT $2::bigint, $1, $2 + 1, $3', ['a', 5, 'c']);
    expect(sql).toBe('SELECT ?::bigint, ?, $1 + 1, ?');
    expect(bindings).toEqual([5, 'a', 'c']);
  });

  it('keeps a repeated parameter one parameter on the server: its type is inferred from all its uses', async () => {
    const db = knex({ client: 'pg', connection: DATABASE_URL, pool: { min: 0, max: 1 } });
    try {
      const { rows } = await knexExecutor(db).query<{ t: string; n: string }>({
        text: 'SELECT ($1::bigint + 1)::text AS n, pg_typeof($1)::text AS t',
        values: ['41'],
      });
      expect(rows).toEqual([{ t: 'bigint', n: '42' }]);
    } finally {
      await db.destroy();
    }
  });

  it('escapes a literal ? and leaves strings, quoted names, dollar quotes and comments alone', () => {
    const text = `SELECT j ? 'k', j ?| $1, '$1 ?', "a$1?", $$ $1 ? $$, $t$ it's $2 $t$, E'\\'$1' -- $1 ?
      /* $1 /* ? */ */ $2`;
    const { sql, bindings } = toKnexRaw(text, ['x', 'y']);
    expect(sql).toBe(
      `SELECT j \\? 'k', j \\?| ?, '$1 \\?', "a$1\\?", $$ $1 \\? $$, $t$ it's $2 $t$, E'\\'$1' -- $1 \\?
      /* $1 /* \\? */ */ ?`,
    );
    expect(bindings).toEqual(['x', 'y']);
  });

  it('keeps a placeholder after a literal ? from reading as ?? or \\??', () => {
    expect(toKnexRaw('SELECT j ?$1', ['k']).sql).toBe('SELECT j \\? ?');
  });

  it('refuses a ? after a backslash, which Knex cannot pass', () => {
    expect(() => toKnexRaw(String.raw`SELECT E'\\?'`, [])).toThrow(/backslash/);
  });

  it('binds what the core passes exactly, arrays as one parameter each', async () => {
    const db = knex({ client: 'pg', connection: DATABASE_URL, pool: { min: 0, max: 1 } });
    try {
      const at = new Date('2026-01-02T03:04:05.678Z');
      const rows = await db.transaction(async (trx) => {
        const { rows } = await knexExecutor(trx).query<Record<string, unknown>>({
          text: `SELECT $1::uuid[] AS u, $2::text[] AS t, $3::int[] AS i, $4::jsonb[] AS j, $5::bytea[] AS b,
                          $6::timestamptz[] AS d, $7::jsonb AS one, $8::bytea AS blob, $2::text[] AS t2, $9 AS n`,
          values: [
            ['0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b'],
            ['a', "it's ?", null],
            [1, 2],
            ['{"a":1}', null],
            [Buffer.from([0, 255]), null],
            [at, null],
            '{"k":[1,2]}',
            Buffer.from([1, 2, 3]),
            null,
          ],
        });
        return rows;
      });
      expect(rows[0]).toEqual({
        u: ['0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b'],
        t: ['a', "it's ?", null],
        i: [1, 2],
        j: [{ a: 1 }, null],
        b: [Buffer.from([0, 255]), null],
        d: [at, null],
        one: { k: [1, 2] },
        blob: Buffer.from([1, 2, 3]),
        t2: ['a', "it's ?", null],
        n: null,
      });
    } finally {
      await db.destroy();
    }
  });

  it('names the fix when given the Knex instance', async () => {
    const db = knex({ client: 'pg', connection: DATABASE_URL, pool: { min: 0, max: 1 } });
    try {
      const error = await enqueue(db as unknown as Knex.Transaction, {
        aggregateType: 'order',
        aggregateId: '1',
        type: 'order.placed',
        payload: {},
      }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxValidationError);
      expect(String((error as Error).message)).toMatch(/knex\.transaction\(async \(trx\)/);
      await db.transaction(async (trx) => {
        expect(() => transactions(trx)).toThrow(/savepoints/);
      });
    } finally {
      await db.destroy();
    }
  });

  it('runs the inbox’s transactions at READ COMMITTED, whatever the connection’s default', async () => {
    const db = knex({
      client: 'pg',
      connection: { connectionString: DATABASE_URL, options: SERIALIZABLE },
      pool: { min: 0, max: 1 },
    });
    const level = "SELECT current_setting('transaction_isolation') AS level";
    try {
      const inside = await transactions(db).transaction((_trx, sql) =>
        sql.query({ text: level, values: [] }),
      );
      expect(inside.rows).toEqual([{ level: 'read committed' }]);
      const outside = await db.transaction((trx) => trx.raw(level));
      expect(outside.rows).toEqual([{ level: 'serializable' }]);
    } finally {
      await db.destroy();
    }
  });
});
