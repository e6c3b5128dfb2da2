/**
 * The inbox on a runner shaped like an ORM's, on the real PostgreSQL: its executors return rows
 * only (no rowCount), ignore statement names, and hand values back as other drivers do — int4 and
 * int8 as bigint, booleans as 't'/'f', bytea as a plain Uint8Array, jsonb as its text — and its
 * errors wrap the driver's (found by `errorCode`, not by `instanceof`). Everything the inbox does
 * must work the same on it.
 */
import type { PoolClient } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pgTransactions } from '../../src/adapters/pg.js';
import { findErrorCode, type SqlExecutor, type TransactionRunner } from '../../src/adapters/transactions.js';
import { createInbox } from '../../src/inbox/inbox.js';
import type { InboxMessage } from '../../src/inbox/message.js';
import { releaseQuarantined } from '../../src/inbox/quarantine.js';
import { createTestDb, type TestDb } from '../helpers/db.js';

/** What an ORM throws: its own error, the driver's under `cause`. */
class OrmError extends Error {
  constructor(cause: unknown) {
    super(`orm: ${(cause as Error)?.message}`, { cause });
  }
}

function reshape(value: unknown): unknown {
  if (typeof value === 'number') return BigInt(value);
  if (typeof value === 'boolean') return value ? 't' : 'f';
  if (Buffer.isBuffer(value)) return new Uint8Array(value);
  if (value !== null && typeof value === 'object' && !(value instanceof Date)) return JSON.stringify(value);
  return value;
}

/** Rows only, values reshaped, names ignored, errors wrapped. */
function ormExecutor(inner: SqlExecutor, log: string[]): SqlExecutor {
  return {
    async query<R extends object>(q: { text: string; values: readonly unknown[]; name?: string }) {
      log.push(q.text.trim().split(/\s+/).slice(0, 2).join(' '));
      try {
        const { rows } = await inner.query<Record<string, unknown>>({ text: q.text, values: q.values });
        return {
          rows: rows.map((r) =>
            Object.fromEntries(Object.entries(r).map(([k, v]) => [k, reshape(v)])),
          ) as R[],
        };
      } catch (error) {
        throw new OrmError(error);
      }
    },
  };
}

/** A runner on pg shaped like an ORM's, with the handler's "ORM transaction" being `{ orm: client }`. */
function ormRunner(pool: TestDb['pool'], log: string[]): TransactionRunner<{ orm: PoolClient }> {
  const pg = pgTransactions(pool);
  return {
    name: 'shaped',
    transaction: (fn) =>
      pg
        .transaction((client, sql) => fn({ orm: client }, ormExecutor(sql, log)))
        .catch((error: unknown) => {
          throw error instanceof OrmError || (error as { code?: unknown })?.code === 'TXO_TRANSACTION_ABORTED'
            ? error
            : new OrmError(error);
        }),
    sql: ormExecutor(pool, log),
    errorCode: (error) => findErrorCode(error),
  };
}

let db: TestDb;
let n = 0;
function message(overrides: Partial<InboxMessage> = {}): InboxMessage {
  n += 1;
  return {
    eventId: crypto.randomUUID(),
    type: 'order.placed',
    aggregateType: 'order',
    aggregateId: `agg-${n}`,
    sequence: 1,
    schemaVersion: 1,
    contentType: 'application/json',
    payload: Buffer.from(JSON.stringify({ n })),
    headers: {},
    ...overrides,
  };
}

beforeAll(async () => {
  db = await createTestDb('inbox_runner');
  await db.pool.query(`CREATE TABLE "${db.schema}".effects (id text PRIMARY KEY)`);
});
afterAll(async () => {
  await db?.close();
});

const effects = async (like: string) =>
  Number(
    (await db.pool.query(`SELECT count(*) AS n FROM "${db.schema}".effects WHERE id LIKE $1`, [like])).rows[0]
      .n,
  );

describe('the inbox on an ORM-shaped runner', () => {
  it('applies once, orders a strict gap, skips the stale, counts attempts read as bigint', async () => {
    const log: string[] = [];
    const inbox = createInbox({ transactions: ormRunner(db.pool, log), consumer: 'a', schema: db.schema });
    const write = async (tx: { orm: PoolClient }, id: string) => {
      await tx.orm.query(`INSERT INTO "${db.schema}".effects (id) VALUES ($1)`, [id]);
    };
    const second = message({ aggregateId: 'ordered', sequence: 2 });
    const gap1 = await inbox.handle(second, (tx, e) => write(tx, `a-${e.eventId}`));
    expect(gap1).toMatchObject({ status: 'deferred', attempts: 1 });
    expect(typeof gap1.attempts).toBe('number');
    expect((await inbox.handle(second, (tx, e) => write(tx, `a-${e.eventId}`))).attempts).toBe(2);
    const first = message({ aggregateId: 'ordered', sequence: 1 });
    expect((await inbox.handle(first, (tx, e) => write(tx, `a-${e.eventId}`))).status).toBe('processed');
    expect((await inbox.handle(second, (tx, e) => write(tx, `a-${e.eventId}`))).status).toBe('processed');
    expect((await inbox.handle(second, (tx, e) => write(tx, `a-${e.eventId}`))).status).toBe('duplicate');
    const old = message({ aggregateId: 'ordered', sequence: 1 });
    expect((await inbox.handle(old, (tx, e) => write(tx, `a-${e.eventId}`))).status).toBe('stale');
    expect(await effects('a-%')).toBe(2);
    // Every statement went through the runner.
    expect(log.length).toBeGreaterThan(6);
  });

  it('charges a handler failure, quarantines after maxAttempts, and replays the released message', async () => {
    const inbox = createInbox({
      transactions: ormRunner(db.pool, []),
      consumer: 'b',
      schema: db.schema,
      maxAttempts: 2,
    });
    const data = { text: 'ü', bytes: [0, 255] };
    const m = message({
      aggregateId: 'failing',
      payload: Buffer.from(JSON.stringify(data)),
      headers: { 'x-tenant': 'acme' },
    });
    const fail = async () => {
      throw new Error('no');
    };
    expect(await inbox.handle(m, fail)).toMatchObject({ status: 'deferred', attempts: 1 });
    expect(await inbox.handle(m, fail)).toMatchObject({ status: 'quarantined' });
    // A successor waits behind it: parked at once (the blocker's `released` read as 'f').
    const next = message({ aggregateId: 'failing', sequence: 2 });
    expect((await inbox.handle(next, fail)).status).toBe('quarantined');
    const { rows } = await db.pool.query(
      `SELECT id::text FROM "${db.schema}".inbox_quarantine WHERE consumer = 'b' AND event_id = $1`,
      [m.eventId],
    );
    await releaseQuarantined(db.pool, { schema: db.schema, ids: [rows[0].id], reason: 'fixed' });
    const seen: unknown[] = [];
    const results = await inbox.replayReleased(async (tx, event) => {
      seen.push({ data: event.data, headers: event.headers, payload: Buffer.from(event.payload) });
      await tx.orm.query(`INSERT INTO "${db.schema}".effects (id) VALUES ($1)`, [`b-${event.eventId}`]);
    });
    expect(results.map((r) => r.status)).toEqual(['processed', 'processed']);
    expect(seen[0]).toEqual({
      data,
      headers: { 'x-tenant': 'acme' },
      payload: Buffer.from(JSON.stringify(data)),
    });
    expect(await effects('b-%')).toBe(2);
  });

  it('charges a swallowed failed statement (TXO_TRANSACTION_ABORTED), never processed', async () => {
    const inbox = createInbox({ transactions: ormRunner(db.pool, []), consumer: 'c', schema: db.schema });
    await db.pool.query(`INSERT INTO "${db.schema}".effects (id) VALUES ('c-taken')`);
    const m = message();
    const result = await inbox.handle(m, async (tx) => {
      await tx.orm.query(`INSERT INTO "${db.schema}".effects (id) VALUES ('c-taken')`).catch(() => undefined);
    });
    expect(result).toMatchObject({ status: 'deferred', attempts: 1 });
    expect(result.error).toMatchObject({ code: 'TXO_TRANSACTION_ABORTED' });
  });

  it('rethrows a wrapped serialization failure, and a wrapped lost connection, charging nothing', async () => {
    const inbox = createInbox({ transactions: ormRunner(db.pool, []), consumer: 'd', schema: db.schema });
    const m = message();
    const raise = (state: string) => async () => {
      throw new OrmError(Object.assign(new Error(`raised ${state}`), { code: state }));
    };
    for (const state of ['40001', '40P01', '57P01', '08006', 'ECONNRESET']) {
      await expect(inbox.handle(m, raise(state)), state).rejects.toBeInstanceOf(OrmError);
    }
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM "${db.schema}".inbox_attempts WHERE consumer = 'd'`,
    );
    expect(rows[0].n).toBe(0);
    // Another SQLSTATE under the ORM's error is the handler's: charged.
    expect(await inbox.handle(m, raise('23505'))).toMatchObject({ status: 'deferred', attempts: 1 });
  });
});
