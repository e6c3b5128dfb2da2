/**
 * tx-outbox/drizzle on both of Drizzle's PostgreSQL drivers: the conformance suite once per driver,
 * then what is Drizzle's own — nested transactions (savepoints), the same connection as the
 * business writes, the refusals, and postgres.js' parameter binding.
 */

import { type AddressInfo, createServer } from 'node:net';
import { eq, sql } from 'drizzle-orm';
import { drizzle as drizzlePg, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { pgSchema, text } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePostgresJs, type PostgresJsDatabase } from 'drizzle-orm/postgres-js';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enqueue, transactions } from '../../src/adapters/drizzle.js';
import {
  arrayLiteral,
  postgresJsExecutor,
  postgresJsText,
  postgresJsValue,
  sessionClient,
} from '../../src/adapters/drizzle-driver.js';
import { OutboxValidationError } from '../../src/errors.js';
import { enqueue as coreEnqueue } from '../../src/producer/enqueue.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { type AdapterHarness, adapterConformance, type OrmUnderTest } from './conformance.js';

type PgTx = Parameters<Parameters<NodePgDatabase['transaction']>[0]>[0];
type PjsTx = Parameters<Parameters<PostgresJsDatabase['transaction']>[0]>[0];
type AnyDb = NodePgDatabase | PostgresJsDatabase;
type AnyTx = PgTx | PjsTx;

function businessTable(schema: string) {
  return pgSchema(schema).table('business', { id: text('id').primaryKey(), note: text('note') });
}

/** The parts of the harness both drivers share: writes through Drizzle's query builder. */
function ormOn<Tx extends AnyTx>(
  db: AnyDb,
  schema: string,
  extra: { nonTransactional: () => readonly unknown[]; close: () => Promise<void> },
): OrmUnderTest<Tx> {
  const business = businessTable(schema);
  return {
    transaction: (fn) => (db as NodePgDatabase).transaction((tx) => fn(tx as Tx)),
    async insertBusiness(tx, id, note) {
      await tx.insert(business).values({ id, note: note ?? null });
    },
    async readPrepared(tx, id) {
      const rows = await tx
        .select({ note: business.note })
        .from(business)
        .where(eq(business.id, sql.placeholder('id')))
        .prepare('txo_drizzle_read')
        .execute({ id });
      return rows[0]?.note ?? undefined;
    },
    nonTransactional: extra.nonTransactional,
    transactions: () =>
      transactions(db as NodePgDatabase) as unknown as ReturnType<OrmUnderTest<Tx>['transactions']>,
    close: extra.close,
  };
}

const nodePostgres: AdapterHarness<PgTx> = {
  name: 'drizzle_node_postgres',
  enqueue,
  async open(url, schema) {
    const pool = new pg.Pool({ connectionString: url, max: 8 });
    const db = drizzlePg(pool);
    return ormOn<PgTx>(db, schema, {
      nonTransactional: () => [db, pool, {}],
      close: () => pool.end(),
    });
  },
};

const postgresJs: AdapterHarness<PjsTx> = {
  name: 'drizzle_postgres_js',
  unawaitedEnqueueUndetected:
    'postgres.js queues the statement on the connection behind the ROLLBACK and has no hook at the send',
  enqueue,
  async open(url, schema) {
    const client = postgres(url, { max: 8, onnotice: () => undefined });
    const db = drizzlePostgresJs(client);
    return ormOn<PjsTx>(db, schema, {
      nonTransactional: () => [db, client, {}],
      close: () => client.end({ timeout: 5 }),
    });
  },
};

adapterConformance(nodePostgres, DATABASE_URL);
adapterConformance(postgresJs, DATABASE_URL);

const event = (aggregateId: string, payload: unknown = {}) => ({
  aggregateType: 'order',
  aggregateId,
  type: 'order.placed',
  payload,
});

describe.each([
  [
    'node-postgres',
    (url: string) => {
      // No 'error' listener on the clients: transactions(db) holds its own while Drizzle has one.
      const pool = new pg.Pool({ connectionString: url, max: 4 });
      return { db: drizzlePg(pool) as AnyDb, close: () => pool.end() };
    },
  ],
  [
    'postgres.js',
    (url: string) => {
      const client = postgres(url, { max: 4, onnotice: () => undefined });
      return { db: drizzlePostgresJs(client) as AnyDb, close: () => client.end({ timeout: 5 }) };
    },
  ],
] as const)('drizzle on %s', (driver, open) => {
  let testDb: TestDb;
  let db: NodePgDatabase;
  let close: () => Promise<void>;
  let options: { schema: string };
  const count = async (aggregateId: string): Promise<number> =>
    Number(
      (
        await testDb.pool.query(
          `SELECT count(*) AS n FROM "${testDb.schema}".events WHERE aggregate_id = $1`,
          [aggregateId],
        )
      ).rows[0].n,
    );

  beforeAll(async () => {
    testDb = await createTestDb(`drizzle_${driver.replace(/\W/g, '_')}`);
    await testDb.pool.query(`CREATE TABLE "${testDb.schema}".business (id text PRIMARY KEY, note text)`);
    options = { schema: testDb.schema };
    const opened = open(DATABASE_URL);
    db = opened.db as NodePgDatabase;
    close = opened.close;
  });
  afterAll(async () => {
    await close?.();
    await testDb?.close();
  });

  it('writes on the transaction’s own connection, inside its BEGIN', async () => {
    const id = `same-${driver}`;
    await db.transaction(async (tx) => {
      const [{ pid, xid }] = (await rowsOf(
        tx.execute(sql`SELECT pg_backend_pid() AS pid, pg_current_xact_id()::text AS xid`),
      )) as [{ pid: number; xid: string }];
      const found = sessionClient(tx);
      expect(found?.driver).toBe(driver);
      await enqueue(tx, event(id), options);
      // Visible to the transaction, not yet to anyone else; written by its transaction id.
      const [row] = (await rowsOf(
        tx.execute(
          sql`SELECT xmin::text AS xmin FROM ${sql.identifier(testDb.schema)}.events WHERE aggregate_id = ${id}`,
        ),
      )) as [{ xmin: string } | undefined];
      expect(row?.xmin).toBe(xid);
      expect(await count(id)).toBe(0);
      const { rows } = await testDb.pool.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1 AND state = 'idle in transaction'`,
        [pid],
      );
      expect(rows[0].n).toBe(1);
    });
    expect(await count(id)).toBe(1);
  });

  it('writes inside nested transactions, and a rolled-back savepoint takes its events with it', async () => {
    const id = `nested-${driver}`;
    await db.transaction(async (tx) => {
      await enqueue(tx, event(id, { at: 'outer' }), options);
      await tx.transaction(async (inner) => {
        await enqueue(inner, [event(id, { at: 'inner' }), event(id, { at: 'inner2' })], options);
        await inner.transaction((deeper) => enqueue(deeper, event(id, { at: 'deeper' }), options));
      });
      await expect(
        tx.transaction(async (inner) => {
          await enqueue(inner, event(id, { at: 'undone' }), options);
          throw new Error('undo the savepoint');
        }),
      ).rejects.toThrow('undo the savepoint');
      await enqueue(tx, event(id, { at: 'after' }), options);
    });
    const { rows } = await testDb.pool.query(
      `SELECT payload->>'at' AS at, sequence::int FROM "${testDb.schema}".events WHERE aggregate_id = $1 ORDER BY id`,
      [id],
    );
    expect(rows.map((r) => r.at)).toEqual(['outer', 'inner', 'inner2', 'deeper', 'after']);
    // The undone savepoint's sequence went with it: no gap.
    expect(rows.map((r) => r.sequence)).toEqual([1, 2, 3, 4, 5]);
  });

  it('enqueues unprepared (prepared: false, for PgBouncer in transaction mode)', async () => {
    const id = `unprepared-${driver}`;
    await db.transaction(async (tx) => {
      await enqueue(tx, event(id), { ...options, prepared: false });
      await enqueue(tx, [event(id), event(id)], { ...options, prepared: false });
    });
    expect(await count(id)).toBe(3);
  });

  it('refuses the database with the fix (and on node-postgres a transaction that has ended)', async () => {
    const error = await enqueue(
      // @ts-expect-error a Drizzle database is not a transaction: no rollback()
      db,
      event('refused'),
      options,
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).field).toBe('tx');
    expect((error as Error).message).toMatch(/database, not a transaction.*db\.transaction\(async \(tx\)/);
    let escaped: PgTx | undefined;
    await db.transaction(async (tx) => {
      escaped = tx;
    });
    // node-postgres' client says it is idle; postgres.js' TransactionSql gives no sign that its
    // transaction ended (its statements then run in autocommit): documented, not detectable.
    if (driver === 'node-postgres') {
      await expect(enqueue(escaped!, event('escaped'), options)).rejects.toThrow(OutboxValidationError);
      expect(await count('escaped')).toBe(0);
    }
    expect(await count('refused')).toBe(0);
  });

  it('transactions(db) refuses a transaction, and rejects a swallowed failure as aborted', async () => {
    await db.transaction(async (tx) => {
      expect(() => transactions(tx as unknown as NodePgDatabase)).toThrow(OutboxValidationError);
    });
    const runner = transactions(db);
    const id = `aborted-${driver}`;
    const error = await runner
      .transaction(async (tx, executor) => {
        await enqueue(tx, event(id), options);
        await executor.query({ text: 'SELECT 1/0', values: [] }).catch(() => undefined);
        return 'returned';
      })
      .catch((e: unknown) => e);
    expect((error as { code?: string }).code).toBe('TXO_TRANSACTION_ABORTED');
    expect(await count(id)).toBe(0);
    const level = await runner.transaction(async (_tx, executor) => {
      const { rows } = await executor.query<{ level: string }>({
        text: 'SELECT current_setting($1) AS level',
        values: ['transaction_isolation'],
      });
      return rows[0]?.level;
    });
    expect(level).toBe('read committed');
    const { rows } = await runner.sql.query<{ n: unknown }>({
      text: 'SELECT $1::int + 1 AS n',
      values: [41],
    });
    expect(Number(rows[0]?.n)).toBe(42);
  });

  it('errorCode finds the SQLSTATE under DrizzleQueryError and a lost connection, not a handler’s network error', async () => {
    const runner = transactions(db);
    const dup = await db
      .transaction(async (tx) => {
        await tx.execute(sql`SELECT 1/0`);
      })
      .catch((e: unknown) => e);
    expect(runner.errorCode(dup)).toBe('22012');
    const terminate = { text: 'SELECT pg_terminate_backend(pg_backend_pid())', values: [] };
    const lost = await runner.sql.query(terminate).catch((e: unknown) => e);
    expect(lost).toBeInstanceOf(Error);
    expect(runner.errorCode(lost)).toMatch(/^(08006|57P01)$/);
    // In a transaction, Drizzle's ROLLBACK fails too, and its error is what comes out. (On
    // postgres.js the runner sends no ROLLBACK to the closed socket: postgres-js-guard.ts.)
    const inTx = await runner
      .transaction((_tx, executor) => executor.query(terminate))
      .catch((e: unknown) => e);
    expect(inTx).toBeInstanceOf(Error);
    expect(runner.errorCode(inTx)).toMatch(/^(08006|57P01)$/);
    expect(runner.errorCode(new Error('plain'))).toBeUndefined();
    // The handler's own call to a service that is down is its failure, not the database's.
    const closed = await closedPort();
    const elsewhere = await runner
      .transaction(() => fetch(`http://127.0.0.1:${closed}/`))
      .catch((e: unknown) => e);
    expect((elsewhere as { cause?: { code?: string } }).cause?.code).toBe('ECONNREFUSED');
    expect(runner.errorCode(elsewhere)).toBeUndefined();
  });
});

describe('postgres.js binding', () => {
  it('sends every parameter the way node-postgres does', () => {
    const at = new Date('2026-01-02T03:04:05.678Z');
    expect(postgresJsValue(at)).toBe('2026-01-02T03:04:05.678Z');
    expect(postgresJsValue(undefined)).toBeNull();
    expect(postgresJsValue(12n)).toBe('12');
    expect(postgresJsValue({ a: 1 })).toBe('{"a":1}');
    const bytes = Buffer.from([0, 255]);
    expect(postgresJsValue(bytes)).toBe(bytes);
    expect(arrayLiteral([bytes, null, Buffer.alloc(0)])).toBe('{"\\\\x00ff",NULL,"\\\\x"}');
    expect(arrayLiteral(['a"b\\c', null, 3, at])).toBe('{"a\\"b\\\\c",NULL,"3","2026-01-02T03:04:05.678Z"}');
    expect(arrayLiteral([])).toBe('{}');
    expect(postgresJsText('SELECT $7::jsonb, $9::JSONB[], $10::jsonbx, $2::json')).toBe(
      'SELECT $7::text::jsonb, $9::text[]::JSONB[], $10::jsonbx, $2::text::json',
    );
  });

  it('binds the enqueue statements on a postgres.js client drizzle-orm never touched', async () => {
    // Its own serializers: jsonb = JSON.stringify, timestamptz = toISOString (drizzle-orm 0.45
    // replaces both on the clients it is given; older versions did not).
    const testDb = await createTestDb('drizzle_raw_postgres_js');
    const client = postgres(DATABASE_URL, { max: 1, onnotice: () => undefined });
    try {
      const later = new Date(Date.now() + 60_000);
      const events = [
        { aggregateType: 'order', aggregateId: 'raw', type: 'a', payload: { n: 1 } },
        {
          aggregateType: 'order',
          aggregateId: 'raw',
          type: 'b',
          payload: Buffer.from([1, 2]),
          deliverAfter: later,
        },
        { aggregateType: 'order', aggregateId: 'raw', type: 'c', payload: 'text', headers: { h: 'v' } },
      ];
      await client.begin(async (tx) => {
        const executor = postgresJsExecutor(tx as unknown as Parameters<typeof postgresJsExecutor>[0]);
        await coreEnqueue(executor, events[0]!, { schema: testDb.schema });
        await coreEnqueue(executor, events, { schema: testDb.schema });
      });
      const { rows } = await testDb.pool.query(
        `SELECT jsonb_typeof(payload) AS kind, payload, payload_bytes, headers, deliver_after
           FROM "${testDb.schema}".events ORDER BY id`,
      );
      expect(rows.map((r) => r.kind)).toEqual(['object', 'object', null, 'string']);
      expect(rows[1].payload).toEqual({ n: 1 });
      expect(Buffer.from(rows[2].payload_bytes)).toEqual(Buffer.from([1, 2]));
      expect(new Date(rows[2].deliver_after).getTime()).toBe(later.getTime());
      expect(rows[3].headers).toMatchObject({ h: 'v' });
    } finally {
      await client.end({ timeout: 5 });
      await testDb.close();
    }
  });
});

/** A port nothing listens on: one the system just gave a server that is closed again. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Rows of `tx.execute(…)`: node-postgres answers `{ rows }`, postgres.js an array. */
async function rowsOf(result: PromiseLike<unknown>): Promise<unknown[]> {
  const r = await result;
  return Array.isArray(r) ? r : (r as { rows: unknown[] }).rows;
}
