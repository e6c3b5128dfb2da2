/**
 * WAL mode on real PostgreSQL: `enqueue(tx, e, { via: 'wal' })` writes the sequence rows and one
 * transactional logical message per event, and no events row. A pgoutput slot of this file's own
 * reads the messages back (pg_logical_slot_get_binary_changes, a tiny 'M' parser here), each
 * authenticated with the schema's WAL key as the CDC relay does (the HMAC the statement computes
 * is node:crypto's) and decoded with decodeWalEvent.
 */
import { drizzle } from 'drizzle-orm/node-postgres';
import knex from 'knex';
import postgres from 'postgres';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { enqueue as drizzleEnqueue } from '../../src/adapters/drizzle.js';
import { enqueue as knexEnqueue } from '../../src/adapters/knex.js';
import { enqueue as postgresJsEnqueue } from '../../src/adapters/postgres-js.js';
import { resolveCdcNames } from '../../src/cdc/setup.js';
import { loadWalKey, type WalKey } from '../../src/cdc/wal-auth.js';
import { OutboxError, OutboxValidationError } from '../../src/errors.js';
import { type EnqueueOptions, enqueue } from '../../src/producer/enqueue.js';
import { walStatements } from '../../src/producer/enqueue-wal-sql.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import type { SqlExecutor } from '../../src/producer/executor.js';
import { decodeWalEvent, eventsPrefix, type WalEvent } from '../../src/producer/wal-message.js';
import { walSlotGate } from '../../src/producer/wal-slot.js';
import { createTestDb, inTransaction, type TestDb } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';

let db: TestDb;
let S: string;
let slot: string;
let pub: string;
let key: WalKey;

beforeAll(async () => {
  db = await createTestDb('walprod', { partitions: 8 });
  S = `"${db.schema}"`;
  slot = (await resolveCdcNames(db.pool, { schema: db.schema })).slot; // this database's default
  pub = `txo_${db.schema}`;
  await db.pool.query(`CREATE PUBLICATION "${pub}" FOR TABLE ${S}.events WITH (publish = 'insert')`);
  await db.pool.query(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, [slot]);
  key = (await loadWalKey(db.pool, db.schema, S)).key;
}, 30_000);

afterAll(async () => {
  if (!db) return;
  await db.pool.query(
    'SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1',
    [slot],
  );
  await db.pool.query(`DROP PUBLICATION IF EXISTS "${pub}"`);
  await db.close();
});

beforeEach(async () => {
  walSlotGate.reset();
  await drain(); // each test reads only its own messages
});

interface Decoded {
  readonly events: WalEvent[];
  /** pgoutput 'I' messages: rows inserted into the published events table. */
  readonly inserts: number;
  /** Messages of our prefix that were not transactional. */
  readonly nonTransactional: number;
}

/** Consumes the slot's changes so far: our prefix's messages decoded, in WAL order. */
async function drain(): Promise<Decoded> {
  const { rows } = await db.pool.query<{ data: Buffer }>(
    `SELECT data FROM pg_logical_slot_get_binary_changes($1, NULL, NULL,
       'proto_version', '1', 'publication_names', $2, 'messages', 'true')`,
    [slot, pub],
  );
  const prefix = eventsPrefix(db.schema);
  const events: WalEvent[] = [];
  let inserts = 0;
  let nonTransactional = 0;
  for (const { data } of rows) {
    const tag = String.fromCharCode(data[0]!);
    if (tag === 'I') inserts++;
    if (tag !== 'M') continue;
    // 'M', flags (1 = transactional), lsn u64, prefix (C string), length u32, content.
    const transactional = data[1] === 1;
    const end = data.indexOf(0, 10);
    const p = data.toString('utf8', 10, end);
    const length = data.readUInt32BE(end + 1);
    const content = data.subarray(end + 5, end + 5 + length);
    if (p !== prefix) continue;
    if (!transactional) nonTransactional++;
    if (!key.verify(content)) throw new Error(`a message of ${p} whose MAC does not verify`);
    events.push(decodeWalEvent(content, { partitions: 8, utf8: true }));
  }
  return { events, inserts, nonTransactional };
}

const wal = (extra: Partial<EnqueueOptions> = {}): EnqueueOptions => ({
  schema: db.schema,
  via: 'wal',
  ...extra,
});
const ev = (id: string, extra: Partial<OutboxEvent> = {}): OutboxEvent => ({
  aggregateType: 'order',
  aggregateId: id,
  type: 'order.changed',
  payload: { id },
  ...extra,
});

async function eventRows(): Promise<number> {
  return Number((await db.pool.query(`SELECT count(*) AS n FROM ${S}.events`)).rows[0].n);
}
async function lastSequence(id: string): Promise<number | undefined> {
  const { rows } = await db.pool.query(
    `SELECT last_sequence::int AS n FROM ${S}.aggregate_sequences WHERE aggregate_id = $1`,
    [id],
  );
  return rows[0]?.n;
}
async function partitionOf(type: string, id: string): Promise<number> {
  return (await db.pool.query(`SELECT ${S}.partition_of($1, $2) AS p`, [type, id])).rows[0].p;
}

describe('enqueue via wal', () => {
  it('single events: gap-free sequences as returned, every field, partition_of, no events row', async () => {
    const returned: number[] = [];
    for (let i = 0; i < 5; i++) {
      // The first takes INSERT_ONE's CTEs; the rest the known-aggregate fast path.
      const r = await inTransaction(db.pool, (tx) =>
        enqueue(
          tx,
          ev('single-1', {
            topic: 'orders.changed',
            headers: { 'x-n': String(i) },
            schemaVersion: 2,
            payload: { i },
          }),
          wal(),
        ),
      );
      returned.push(r.sequence);
    }
    const { events, inserts, nonTransactional } = await drain();
    expect(returned).toEqual([1, 2, 3, 4, 5]);
    expect(events.map((e) => e.sequence)).toEqual(returned);
    expect(inserts).toBe(0);
    expect(nonTransactional).toBe(0);
    expect(await eventRows()).toBe(0);
    expect(await lastSequence('single-1')).toBe(5);
    const p = await partitionOf('order', 'single-1');
    expect(p).not.toBe(0); // a partition of 0 would pass a statement that wrote none
    const dbNow = (await db.pool.query('SELECT now() AS t')).rows[0].t as Date;
    for (const [i, e] of events.entries()) {
      expect(e).toMatchObject({
        aggregateType: 'order',
        aggregateId: 'single-1',
        type: 'order.changed',
        topic: 'orders.changed',
        schemaVersion: 2,
        sequenceBase: 0,
        partition: p,
        contentType: 'application/json',
        headers: { 'x-n': String(i) },
      });
      expect(JSON.parse(e.payload.toString())).toEqual({ i });
      expect(Math.abs(e.createdAt.getTime() - dbNow.getTime())).toBeLessThan(60_000);
    }
  });

  it('a rolled-back transaction emits nothing and takes no sequence', async () => {
    await inTransaction(db.pool, (tx) => enqueue(tx, ev('rb'), wal()));
    await expect(
      inTransaction(db.pool, async (tx) => {
        await enqueue(tx, [ev('rb'), ev('rb')], wal());
        throw new Error('business failure');
      }),
    ).rejects.toThrow('business failure');
    const r = await inTransaction(db.pool, (tx) => enqueue(tx, ev('rb'), wal()));
    expect(r.sequence).toBe(2);
    const { events } = await drain();
    expect(events.map((e) => [e.aggregateId, e.sequence])).toEqual([
      ['rb', 1],
      ['rb', 2],
    ]);
  });

  it('a rolled-back savepoint drops its messages; the rest of the transaction commits', async () => {
    await inTransaction(db.pool, async (tx) => {
      await enqueue(tx, ev('sp'), wal());
      await tx.query('SAVEPOINT s');
      await enqueue(tx, [ev('sp'), ev('sp')], wal());
      await tx.query('ROLLBACK TO SAVEPOINT s');
      await enqueue(tx, ev('sp'), wal());
    });
    const { events } = await drain();
    expect(events.map((e) => e.sequence)).toEqual([1, 2]);
  });

  it('a batch of 1,000 over several aggregates: emitted in the order given, sequences as returned', async () => {
    const batch = Array.from({ length: 1000 }, (_, i) =>
      ev(`b${(i * 7) % 13}`, { payload: i % 3 === 0 ? new Uint8Array([i & 0xff, i >> 8]) : { i } }),
    );
    // One aggregate already has a row: the batch's UPDATE branch and its INSERT branch both run.
    await inTransaction(db.pool, (tx) => enqueue(tx, ev('b0'), wal()));
    await drain();
    const results = await inTransaction(db.pool, (tx) => enqueue(tx, batch, wal()));
    const { events, inserts } = await drain();
    expect(inserts).toBe(0);
    expect(events).toHaveLength(1000);
    expect(events.map((e) => e.eventId)).toEqual(results.map((r) => r.eventId));
    expect(events.map((e) => e.sequence)).toEqual(results.map((r) => r.sequence));
    const next = new Map<string, number>([['b0', 2]]);
    for (const [i, e] of events.entries()) {
      expect(e.aggregateId).toBe(batch[i]!.aggregateId);
      const want = next.get(e.aggregateId) ?? 1;
      expect(e.sequence).toBe(want);
      next.set(e.aggregateId, want + 1);
      if (i % 3 === 0) expect([...e.payload]).toEqual([i & 0xff, i >> 8]);
      else expect(JSON.parse(e.payload.toString())).toEqual({ i });
    }
    for (const [id, n] of next) expect(await lastSequence(id)).toBe(n - 1);
    expect(await eventRows()).toBe(0);
  });

  it('caller versions: single and batch, sequence_base 0, no sequence row', async () => {
    const one = await inTransaction(db.pool, (tx) => enqueue(tx, ev('cv', { sequence: 1 }), wal()));
    const many = await inTransaction(db.pool, (tx) =>
      enqueue(tx, [ev('cv', { sequence: 2 }), ev('cv2', { sequence: 7 }), ev('cv', { sequence: 3 })], wal()),
    );
    expect(one.sequence).toBe(1);
    expect(many.map((r) => r.sequence)).toEqual([2, 7, 3]);
    const { events } = await drain();
    expect(events.map((e) => [e.aggregateId, e.sequence, e.sequenceBase])).toEqual([
      ['cv', 1, 0],
      ['cv', 2, 0],
      ['cv2', 7, 0],
      ['cv', 3, 0],
    ]);
    expect(events[2]!.partition).toBe(await partitionOf('order', 'cv2'));
    expect(await lastSequence('cv')).toBeUndefined();
  });

  it('a batch mixing assigned and caller versions: both statements, in one transaction', async () => {
    const r = await inTransaction(db.pool, (tx) =>
      enqueue(
        tx,
        [ev('mix-a'), ev('mix-v', { sequence: 1 }), ev('mix-a'), ev('mix-v', { sequence: 2 })],
        wal(),
      ),
    );
    expect(r.map((x) => x.sequence)).toEqual([1, 1, 2, 2]);
    const { events } = await drain();
    expect(events.map((e) => `${e.aggregateId}/${e.sequence}`).sort()).toEqual(
      ['mix-a/1', 'mix-a/2', 'mix-v/1', 'mix-v/2'].sort(),
    );
  });

  it('table mode and WAL mode share one aggregate sequence', async () => {
    const t = await inTransaction(db.pool, (tx) => enqueue(tx, ev('shared'), { schema: db.schema }));
    const w = await inTransaction(db.pool, (tx) => enqueue(tx, ev('shared'), wal()));
    expect([t.sequence, w.sequence]).toEqual([1, 2]);
    const { events, inserts } = await drain();
    expect(inserts).toBe(1);
    expect(events.map((e) => e.sequence)).toEqual([2]);
    await db.pool.query(`DELETE FROM ${S}.events`);
  });

  it('refusals write nothing: deliverAfter, no slot, a bad slot name, bad input, a bad via', async () => {
    const before = await lastSequence('refused');
    const deliverAfter = new Date(Date.now() + 60_000);
    const attempt = (events: OutboxEvent | OutboxEvent[], options: EnqueueOptions): Promise<unknown> =>
      inTransaction(
        db.pool,
        (tx): Promise<unknown> =>
          Array.isArray(events) ? enqueue(tx, events, options) : enqueue(tx, events, options),
      );

    const scheduled = await attempt(ev('refused', { deliverAfter }), wal()).catch((e: unknown) => e);
    expect(scheduled).toBeInstanceOf(OutboxValidationError);
    expect((scheduled as OutboxValidationError).field).toBe('event.deliverAfter');
    expect((scheduled as Error).message).toMatch(/Use the table for scheduled events/);
    const inBatch = await attempt([ev('refused'), ev('refused', { deliverAfter })], wal()).catch(
      (e: unknown) => e,
    );
    expect((inBatch as OutboxValidationError).field).toBe('events[1].deliverAfter');

    const noSlot = await attempt(ev('refused'), wal({ slot: 'txo_no_such_slot_walprod' })).catch(
      (e: unknown) => e,
    );
    expect(noSlot).toBeInstanceOf(OutboxError);
    expect((noSlot as OutboxError).code).toBe('TXO_CDC_NO_SLOT');
    expect((noSlot as Error).message).toMatch(
      /txo_no_such_slot_walprod.*does not exist.*tx-outbox migrate --cdc/,
    );
    const batchNoSlot = await attempt(
      [ev('refused'), ev('refused')],
      wal({ slot: 'txo_no_such_slot_walprod' }),
    ).catch((e: unknown) => e);
    expect((batchNoSlot as OutboxError).code).toBe('TXO_CDC_NO_SLOT');

    const badSlot = await attempt(ev('refused'), wal({ slot: 'Bad-Name' })).catch((e: unknown) => e);
    expect((badSlot as OutboxValidationError).field).toBe('slot');
    const badType = await attempt([ev('refused'), ev('refused', { type: '' })], wal()).catch(
      (e: unknown) => e,
    );
    expect((badType as OutboxValidationError).field).toBe('events[1].type');
    const badVia = await attempt(ev('refused'), wal({ via: 'kafka' as 'wal' })).catch((e: unknown) => e);
    expect((badVia as OutboxValidationError).field).toBe('via');

    expect(await lastSequence('refused')).toBe(before);
    const { events, inserts } = await drain();
    expect(events).toEqual([]);
    expect(inserts).toBe(0);
  });

  it('the slot check runs once per 5 s per database, schema and slot, not per call', async () => {
    const texts: string[] = [];
    await inTransaction(db.pool, async (client) => {
      // The database the handle is connected to keys the cached verdict (a handle that cannot
      // tell is checked on every call: see the test below).
      const counting: SqlExecutor & { connectionParameters: unknown } = {
        connectionParameters: (client as unknown as { connectionParameters: unknown }).connectionParameters,
        query: (q) => {
          texts.push(q.text);
          return client.query(q as never) as never;
        },
      };
      for (let i = 0; i < 4; i++) await enqueue(counting, ev('cached'), wal());
      await enqueue(counting, [ev('cached'), ev('cached')], wal());
    });
    expect(texts.filter((t) => t.includes('pg_replication_slots'))).toHaveLength(1);
    expect(texts.filter((t) => t.includes('pg_logical_emit_message'))).toHaveLength(5);
    expect((await drain()).events).toHaveLength(6);
  });

  it('the slot check runs on every call for a handle that cannot tell its database', async () => {
    const texts: string[] = [];
    await inTransaction(db.pool, async (client) => {
      const counting: SqlExecutor = {
        query: (q) => {
          texts.push(q.text);
          return client.query(q as never) as never;
        },
      };
      for (let i = 0; i < 3; i++) await enqueue(counting, ev('uncached'), wal());
    });
    expect(texts.filter((t) => t.includes('pg_replication_slots'))).toHaveLength(3);
    expect((await drain()).events).toHaveLength(3);
  });

  it('the batch statement emits the messages above its sort by ord (EXPLAIN)', async () => {
    // The batch's order rests on PostgreSQL evaluating the volatile call after the Sort node.
    const client = await db.pool.connect();
    try {
      await client.query(`PREPARE wal_many(bytea[], text[], text[]) AS ${walStatements(db.schema, S).many}`);
      const { rows } = await client.query<{ 'QUERY PLAN': string }>(
        "EXPLAIN (VERBOSE, COSTS OFF) EXECUTE wal_many('{}', '{}', '{}')",
      );
      const plan = rows.map((r) => r['QUERY PLAN']);
      expect(plan[0]).toBe('Result');
      expect(plan[1]).toMatch(/^ {2}Output: .*pg_logical_emit_message\(true/);
      const top = plan.filter((l) => /^ {2}->/.test(l));
      expect(top[0]).toMatch(/-> {2}Sort/);
      expect(plan[plan.indexOf(top[0]!) + 2]).toMatch(/Sort Key: n\.ord$/);
    } finally {
      client.release();
    }
  });
});

describe('via wal through the adapters', () => {
  const check = async (results: { sequence: number; eventId: string }[]) => {
    const { events } = await drain();
    expect(events.map((e) => [e.eventId, e.sequence])).toEqual(results.map((r) => [r.eventId, r.sequence]));
    // Each adapter's batch holds one bytes payload: it arrives as those bytes, the rest as their JSON.
    const bytes = events.filter((e) => e.contentType === 'application/octet-stream');
    expect(bytes).toHaveLength(1);
    expect([2, 255]).toContain(bytes[0]!.payload[1]);
    for (const e of events) {
      if (e.contentType === 'application/json')
        expect(JSON.parse(e.payload.toString())).toEqual({ id: e.aggregateId });
    }
  };

  it('pg (PoolClient)', async () => {
    const results = await inTransaction(db.pool, async (tx) => [
      await enqueue(tx, ev('pg'), wal()),
      ...(await enqueue(tx, [ev('pg'), ev('pg', { payload: new Uint8Array([1, 2]) })], wal())),
    ]);
    expect(results.map((r) => r.sequence)).toEqual([1, 2, 3]);
    await check(results);
  });

  it('drizzle (node-postgres)', async () => {
    const d = drizzle(db.pool);
    const results = await d.transaction(async (tx) => [
      await drizzleEnqueue(tx, ev('drizzle'), wal()),
      ...(await drizzleEnqueue(
        tx,
        [ev('drizzle'), ev('drizzle', { payload: new Uint8Array([1, 2]) })],
        wal(),
      )),
      await drizzleEnqueue(tx, ev('drizzle-v', { sequence: 1 }), wal()),
    ]);
    expect(results.map((r) => r.sequence)).toEqual([1, 2, 3, 1]);
    await check(results);
  });

  it('knex', async () => {
    const k = knex({ client: 'pg', connection: DATABASE_URL, pool: { min: 0, max: 2 } });
    try {
      const results = await k.transaction(async (trx) => [
        await knexEnqueue(trx, ev('knex'), wal()),
        ...(await knexEnqueue(trx, [ev('knex'), ev('knex', { payload: new Uint8Array([1, 2]) })], wal())),
        ...(await knexEnqueue(trx, [ev('knex-v', { sequence: 1 }), ev('knex-v', { sequence: 2 })], wal())),
      ]);
      expect(results.map((r) => r.sequence)).toEqual([1, 2, 3, 1, 2]);
      await check(results);
    } finally {
      await k.destroy();
    }
  });

  it('postgres.js (bytea arrays through its own parameter binding)', async () => {
    const sql = postgres(DATABASE_URL, { max: 2, onnotice: () => undefined });
    try {
      const results = await sql.begin(async (tx) => [
        await postgresJsEnqueue(tx, ev('pjs'), wal()),
        ...(await postgresJsEnqueue(
          tx,
          [ev('pjs'), ev('pjs', { payload: new Uint8Array([0, 255]) })],
          wal(),
        )),
        ...(await postgresJsEnqueue(tx, [ev('pjs-v', { sequence: 1 }), ev('pjs-v', { sequence: 2 })], wal())),
      ]);
      expect(results.map((r) => r.sequence)).toEqual([1, 2, 3, 1, 2]);
      await check(results);
      const { events } = await drain();
      expect(events).toEqual([]);
    } finally {
      await sql.end();
    }
  });
});
