import { CamelCasePlugin, Kysely, PostgresDialect, sql, type Transaction } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enqueue, transactions } from '../../src/adapters/kysely.js';
import { OutboxError, OutboxValidationError } from '../../src/errors.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { type AdapterHarness, adapterConformance } from './conformance.js';

interface Db {
  business: { id: string; note: string | null };
}

function open(url: string, max = 8): Kysely<Db> {
  const pool = new pg.Pool({ connectionString: url, max });
  // A connection lost while checked out (between a transaction's statements) emits 'error' on its
  // client, which pg leaves without a listener: every application attaches one (docs/adapters.md).
  pool.on('error', () => undefined);
  pool.on('connect', (client) => client.on('error', () => undefined));
  return new Kysely<Db>({ dialect: new PostgresDialect({ pool }) });
}

/** Kysely with its pg dialect on a pg Pool; no readPrepared: the dialect prepares nothing. */
const harness: AdapterHarness<Transaction<Db>> = {
  name: 'kysely',
  unawaitedEnqueueUndetected: "Kysely's Transaction keeps no state after execute() and hides its pg client",
  enqueue,
  async open(url, schema) {
    const db = open(url);
    return {
      transaction: (fn) => db.transaction().execute(fn),
      async insertBusiness(trx, id, note) {
        await trx
          .withSchema(schema)
          .insertInto('business')
          .values({ id, note: note ?? null })
          .execute();
      },
      nonTransactional: () => [db, db.withSchema(schema), db.withPlugin(new CamelCasePlugin())],
      transactions: () => transactions(db),
      close: () => db.destroy(),
    };
  },
};

adapterConformance(harness, DATABASE_URL);

describe('Kysely specifics', () => {
  let db: TestDb;
  let kdb: Kysely<Db>;
  const event = (id: string, extra: Record<string, unknown> = {}) => ({
    aggregateType: 'order',
    aggregateId: id,
    type: 'order.placed',
    payload: {} as unknown,
    ...extra,
  });

  beforeAll(async () => {
    db = await createTestDb('adapter_kysely_more');
    await db.pool.query(`CREATE TABLE "${db.schema}".business (id text PRIMARY KEY, note text)`);
    kdb = open(DATABASE_URL, 4);
  });
  afterAll(async () => {
    await kdb?.destroy();
    await db?.close();
  });

  it('reads results past a CamelCasePlugin: batch sequences are right', async () => {
    const camel = kdb.withPlugin(new CamelCasePlugin());
    const results = await camel
      .transaction()
      .execute((trx) =>
        enqueue(trx, [event('camel'), event('camel'), event('camel')], { schema: db.schema }),
      );
    expect(results.map((r) => r.sequence)).toEqual([1, 2, 3]);
  });

  it('takes a ControlledTransaction (db.startTransaction())', async () => {
    const trx = await kdb.startTransaction().execute();
    const result = await enqueue(trx, event('controlled'), { schema: db.schema });
    await trx.commit().execute();
    expect(result.sequence).toBe(1);
  });

  it('binds caller versions, one and a batch (bigint[])', async () => {
    const results = await kdb
      .transaction()
      .execute(async (trx) => [
        await enqueue(trx, event('versioned-1', { sequence: 7 }), { schema: db.schema }),
        ...(await enqueue(
          trx,
          [event('versioned-2', { sequence: 2 ** 53 - 2 }), event('versioned-2', { sequence: 2 ** 53 - 1 })],
          { schema: db.schema },
        )),
      ]);
    expect(results.map((r) => r.sequence)).toEqual([7, 2 ** 53 - 2, 2 ** 53 - 1]);
  });

  it('binds bytea[] with a Buffer first and nulls, jsonb[] and timestamptz[] exactly', async () => {
    const at = new Date('2031-02-03T04:05:06.789Z');
    const blob = Buffer.from([0x5c, 0x22, 0x00, 0xff]);
    await kdb
      .transaction()
      .execute((trx) =>
        enqueue(
          trx,
          [
            event('bind', { payload: blob, deliverAfter: at }),
            event('bind', { payload: { s: '{"x":[1,2]}', u: 'ü\\"' } }),
          ],
          { schema: db.schema },
        ),
      );
    const { rows } = await db.pool.query(
      `SELECT payload, payload_bytes, deliver_after FROM "${db.schema}".events
       WHERE aggregate_id = 'bind' ORDER BY sequence`,
    );
    expect(Buffer.from(rows[0].payload_bytes)).toEqual(blob);
    expect(new Date(rows[0].deliver_after).getTime()).toBe(at.getTime());
    expect(rows[1].payload).toEqual({ s: '{"x":[1,2]}', u: 'ü\\"' });
    expect(rows[1].payload_bytes).toBeNull();
  });

  it('refuses a Kysely instance and a connection, naming db.transaction()', async () => {
    const refused = async (handle: unknown) => {
      const error = await enqueue(handle as never, event('refused'), { schema: db.schema }).catch(
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(OutboxValidationError);
      expect((error as OutboxValidationError).field).toBe('tx');
      expect((error as Error).message).toContain('db.transaction()');
    };
    await refused(kdb);
    await kdb.connection().execute((conn) => refused(conn));
    await refused({ executeQuery: () => undefined });
    expect(() => transactions({} as never)).toThrow(OutboxValidationError);
    await kdb.transaction().execute(async (trx) => {
      expect(() => transactions(trx as never)).toThrow(/Kysely instance/);
    });
  });

  it('runs READ COMMITTED, commits, rolls back; sql runs on its own', async () => {
    const runner = transactions(kdb);
    expect(runner.name).toBe('kysely');
    const level = await runner.transaction(async (trx, exec) => {
      await trx.withSchema(db.schema).insertInto('business').values({ id: 'rc-1', note: null }).execute();
      await exec.query({
        text: `INSERT INTO "${db.schema}".business (id, note) VALUES ($1, $2)`,
        values: ['rc-2', null],
      });
      return (await sql<{ l: string }>`SELECT current_setting('transaction_isolation') AS l`.execute(trx))
        .rows[0]!.l;
    });
    expect(level).toBe('read committed');
    await expect(
      runner.transaction(async (trx) => {
        await trx.withSchema(db.schema).insertInto('business').values({ id: 'rc-3', note: null }).execute();
        throw new Error('no');
      }),
    ).rejects.toThrow('no');
    const { rows } = await runner.sql.query<{ id: string }>({
      text: `SELECT id FROM "${db.schema}".business WHERE id LIKE 'rc-%' ORDER BY id`,
      values: [],
    });
    expect(rows.map((r) => r.id)).toEqual(['rc-1', 'rc-2']);
  });

  it('rejects with abortedTransaction() when fn swallowed a failed statement, committing nothing', async () => {
    const runner = transactions(kdb);
    const insert = (trx: Transaction<Db>) =>
      trx.withSchema(db.schema).insertInto('business').values({ id: 'ab-1', note: null }).execute();
    const error = await runner
      .transaction(async (trx) => {
        await insert(trx);
        await insert(trx).catch(() => undefined);
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxError);
    expect((error as OutboxError).code).toBe('TXO_TRANSACTION_ABORTED');
    expect(
      Number(
        (await db.pool.query(`SELECT count(*) AS n FROM "${db.schema}".business WHERE id = 'ab-1'`)).rows[0]
          .n,
      ),
    ).toBe(0);
  });

  it("charges the handler's own network failure: its connection was fine", async () => {
    const runner = transactions(kdb);
    const refused = Object.assign(new Error('connect ECONNREFUSED 10.0.0.1:443'), { code: 'ECONNREFUSED' });
    const error = await runner
      .transaction(async (trx) => {
        await trx.withSchema(db.schema).insertInto('business').values({ id: 'own-1', note: null }).execute();
        throw refused;
      })
      .catch((e: unknown) => e);
    expect(error).toBe(refused);
    expect(runner.errorCode(error)).toBeUndefined();
    expect(
      Number(
        (await db.pool.query(`SELECT count(*) AS n FROM "${db.schema}".business WHERE id = 'own-1'`)).rows[0]
          .n,
      ),
    ).toBe(0);
  });

  it('errorCode reads SQLSTATEs and a lost connection', async () => {
    const runner = transactions(kdb);
    const conflict = await runner
      .transaction((_trx, exec) =>
        exec.query({ text: `DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40001'; END $$`, values: [] }),
      )
      .catch((e: unknown) => e);
    expect(runner.errorCode(conflict)).toBe('40001');
    const killed = await runner
      .transaction(async (_trx, exec) => {
        const { rows } = await exec.query<{ pid: number }>({
          text: 'SELECT pg_backend_pid() AS pid',
          values: [],
        });
        await db.pool.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
        await new Promise((resolve) => setTimeout(resolve, 200));
        await exec.query({ text: 'SELECT 1', values: [] });
      })
      .catch((e: unknown) => e);
    expect(['57P01', '08006']).toContain(runner.errorCode(killed));
    expect(runner.errorCode(new Error('plain'))).toBeUndefined();
  });
});
