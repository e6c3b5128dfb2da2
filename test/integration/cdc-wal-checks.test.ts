/**
 * Damaged WAL-mode messages through a real CDC relay (review rev-wal F1–F9), written with the
 * schema's WAL key — by a holder of the producer's rights who bypasses `enqueue` (messages
 * without the key are refused outright: cdc-forgery.test.ts): each is dead-lettered with a
 * reason, or delivered, and the stream goes on (no reconnect, the slot confirms past it).
 * Reproductions adapted from test/integration/rev-wal.test.ts.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { type CdcRelay, createCdcRelay } from '../../src/cdc/relay.js';
import { dropCdcSlot, ensureCdcSlot, resolveCdcNames } from '../../src/cdc/setup.js';
import { handoverPrefix } from '../../src/cdc/stream-batch.js';
import { loadWalKey } from '../../src/cdc/wal-auth.js';
import { replayDead } from '../../src/ops/dead-letter.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { PreparedEvent } from '../../src/producer/event.js';
import { partitionOf } from '../../src/producer/partition-of.js';
import { encodeWalBody, eventsPrefix } from '../../src/producer/wal-message.js';
import { walSlotGate } from '../../src/producer/wal-slot.js';
import type { OutboxMessage } from '../../src/publishers/contract.js';
import { migrate } from '../../src/schema/migrate.js';
import { inTransaction, waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 20 });
const schemas: string[] = [];
const relays: CdcRelay[] = [];
const cleanups: Array<() => Promise<void>> = [];
const SECRET = 'payload-secret-7f3a';

afterEach(async () => {
  await Promise.all(relays.splice(0).map((r) => r.stop({ timeout: 5000 })));
  for (const f of cleanups.splice(0)) await f().catch(() => undefined);
});
afterAll(async () => {
  for (const s of schemas) {
    await dropCdcSlot(pool, { schema: s }).catch(() => undefined);
    await pool.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
  }
  await pool.end();
});

async function fresh(): Promise<string> {
  const schema = `cdc_fixwal_${randomBytes(3).toString('hex')}`;
  schemas.push(schema);
  await migrate(pool, { schema, partitions: 4 });
  await ensureCdcSlot(pool, { schema });
  // Each case's slot goes with the case: slots are server-wide (max_replication_slots), shared
  // with every other test file running meanwhile.
  cleanups.push(() => dropCdcSlot(pool, { schema }).then(() => undefined));
  walSlotGate.reset();
  return schema;
}

const logged: string[] = [];
function relay(schema: string, publisher: RecordingPublisher): CdcRelay {
  const log = (level: string) => (o: object, m?: string) => {
    logged.push(
      `${level} ${m ?? ''} ${JSON.stringify(o, (_k, v) => (v instanceof Error ? { ...v, message: v.message } : v))}`,
    );
  };
  const r = createCdcRelay({
    pool,
    publisher,
    schema,
    pollIntervalMs: 50,
    leaseMs: 3000,
    batchSize: 100,
    heartbeatMs: 300,
    silenceTimeoutMs: 5000,
    statusIntervalMs: 100,
    backoff: { baseMs: 50, capMs: 200 },
    maxAttempts: 2,
    logger: { debug: () => {}, info: () => {}, warn: log('warn'), error: log('error') },
  });
  relays.push(r);
  return r;
}

/**
 * A WAL-mode message content as a buggy application with the producer's rights would write it:
 * format 2, its MAC made with the schema's key.
 */
async function foreign(
  schema: string,
  over: Partial<PreparedEvent> & { partition?: number; sequence?: number },
): Promise<Buffer> {
  const e: PreparedEvent = {
    eventId: randomUUID(),
    aggregateType: 'order',
    aggregateId: 'evil',
    type: 'changed',
    schemaVersion: 1,
    topic: null,
    payloadJson: '{"x":1}',
    payloadBytes: null,
    headers: '{}',
    deliverAfter: null,
    sequence: null,
    bytes: 0,
    ...over,
  };
  const head = Buffer.alloc(27);
  head.writeUInt8(2, 0);
  head.writeBigInt64BE(BigInt(over.sequence ?? 1), 1);
  head.writeBigInt64BE(0n, 9);
  head.writeInt16BE(over.partition ?? partitionOf(e.aggregateType, e.aggregateId, 4)!, 17);
  head.writeBigInt64BE(BigInt(Date.now()) * 1000n, 19);
  const data = Buffer.concat([head, encodeWalBody(e)]);
  const { key } = await loadWalKey(pool, schema, `"${schema}"`);
  return Buffer.concat([data, key.mac(data)]);
}

async function emit(prefix: string, content: Buffer, transactional = true): Promise<void> {
  await pool.query('SELECT pg_logical_emit_message($3, $1::text, $2::bytea)', [
    prefix,
    content,
    transactional,
  ]);
}

async function good(schema: string, aggregateId = 'good'): Promise<void> {
  await inTransaction(pool, (tx) =>
    enqueue(
      tx,
      { aggregateType: 'order', aggregateId, type: 'changed', payload: {} },
      { schema, via: 'wal' },
    ),
  );
}

async function currentLsn(): Promise<string> {
  const { rows } = await pool.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
  return rows[0]!.lsn;
}

async function slotPast(schema: string, lsn: string): Promise<boolean> {
  const { rows } = await pool.query<{ past: boolean }>(
    'SELECT confirmed_flush_lsn >= $2::pg_lsn AS past FROM pg_replication_slots WHERE slot_name = $1',
    [(await resolveCdcNames(pool, { schema })).slot, lsn],
  );
  return rows[0]?.past === true;
}

async function deadRows(
  schema: string,
): Promise<Array<{ aggregate_type: string; last_error: string; partition: number }>> {
  const { rows } = await pool.query(
    `SELECT aggregate_type, last_error, partition FROM "${schema}".events WHERE status = 'dead' ORDER BY id`,
  );
  return rows;
}

function ids(received: readonly OutboxMessage[]): string[] {
  return received.map((m) => `${m.aggregateId}:${m.sequence}`);
}

/** The foreign message is dead with `reason`, 'good' delivered once, no reconnect, the slot past both. */
async function settlesPast(
  schema: string,
  r: CdcRelay,
  pub: RecordingPublisher,
  reason: RegExp,
): Promise<void> {
  await good(schema);
  const after = await currentLsn();
  await waitFor(() => slotPast(schema, after), {
    timeoutMs: 10_000,
    what: 'the slot to move past the foreign message',
  });
  expect(r.stats().cdc.reconnects).toBe(0);
  expect(ids(pub.received).filter((id) => id.startsWith('good'))).toEqual(['good:1']);
  const dead = await deadRows(schema);
  expect(dead).toHaveLength(1);
  expect(dead[0]!.aggregate_type).toBe('tx-outbox.undecodable');
  expect(dead[0]!.last_error).toMatch(reason);
  expect(dead[0]!.last_error).not.toContain(SECRET);
  expect(logged.filter((l) => l.includes(SECRET))).toEqual([]);
}

describe('cdc-wal-checks', () => {
  it("F1: a look-alike handover marker does not hide the transaction's WAL-mode events", async () => {
    const schema = await fresh();
    const pub = new RecordingPublisher();
    await relay(schema, pub).start();
    await inTransaction(pool, async (tx) => {
      await enqueue(
        tx,
        { aggregateType: 'order', aggregateId: 'a1', type: 'changed', payload: { i: 1 } },
        { schema, via: 'wal' },
      );
      await tx.query(`SELECT pg_logical_emit_message(true, $1::text, 'audit')`, [handoverPrefix(schema)]);
    });
    await inTransaction(pool, async (tx) => {
      await enqueue(
        tx,
        { aggregateType: 'order', aggregateId: 'a2', type: 'changed', payload: { i: 2 } },
        { schema, via: 'wal' },
      );
      // Even a marker forged with the transaction's own id: an events message proves it is not a handover.
      await tx.query(`SELECT pg_logical_emit_message(true, $1::text, pg_current_xact_id()::text)`, [
        handoverPrefix(schema),
      ]);
    });
    await good(schema, 'a3');
    await waitFor(() => pub.received.some((m) => m.aggregateId === 'a3'), { what: 'a3' });
    expect(ids(pub.received)).toEqual(['a1:1', 'a2:1', 'a3:1']);
  });

  it('F2: a NUL in a name: dead at decode, the stream goes on', async () => {
    const schema = await fresh();
    const pub = new RecordingPublisher();
    const r = relay(schema, pub);
    await r.start();
    await emit(eventsPrefix(schema), await foreign(schema, { aggregateType: 'ord\u0000er' }));
    await settlesPast(schema, r, pub, /aggregate_type: contains U\+0000/);
  });

  it('F3: a JSON payload that is not JSON, refused by the publisher: dead at decode, never published', async () => {
    const schema = await fresh();
    const pub = new RecordingPublisher();
    pub.verdict = (m) =>
      m.aggregateId === 'evil'
        ? { ok: false, retryable: false, error: new Error('consumer refused') }
        : { ok: true };
    const r = relay(schema, pub);
    await r.start();
    await emit(eventsPrefix(schema), await foreign(schema, { payloadJson: `not json ${SECRET}` }));
    await settlesPast(schema, r, pub, /JSON payload that is not valid JSON/);
  });

  it('second line: a payload jsonb refuses past decode (numeric overflow) is kept dead, the stream goes on', async () => {
    const schema = await fresh();
    const pub = new RecordingPublisher();
    pub.verdict = (m) =>
      m.aggregateId === 'evil'
        ? { ok: false, retryable: false, error: new Error('consumer refused') }
        : { ok: true };
    const r = relay(schema, pub);
    await r.start();
    await emit(
      eventsPrefix(schema),
      await foreign(schema, { payloadJson: `{"n":1e200000,"s":"${SECRET}"}` }),
    );
    await settlesPast(
      schema,
      r,
      pub,
      /refused it: value overflows numeric format \(SQLSTATE 22003\).*"order"\/"evil" sequence 1/,
    );
    const { rows } = await pool.query(`SELECT payload, payload_bytes FROM "${schema}".events`);
    expect(rows[0].payload).toBeNull();
    expect(rows[0].payload_bytes.toString()).toContain(SECRET);
  });

  it("F4: a partition other than partition_of's (999): dead at decode, never published", async () => {
    const schema = await fresh();
    const pub = new RecordingPublisher();
    const r = relay(schema, pub);
    await r.start();
    await emit(eventsPrefix(schema), await foreign(schema, { partition: 999 }));
    await settlesPast(schema, r, pub, /has a partition of 999, where partition_of gives \d+ of 4/);
    expect(pub.received.filter((m) => m.aggregateId === 'evil')).toEqual([]);
  });

  it("F4: the handed-over row's partition is partition_of's, so a replayed dead event is delivered", async () => {
    const schema = await fresh();
    const pub = new RecordingPublisher();
    let refuse = true;
    pub.verdict = (m) =>
      m.aggregateId === 'evil' && refuse
        ? { ok: false, retryable: false, error: new Error('refused once') }
        : { ok: true };
    const r = relay(schema, pub);
    await r.start();
    await emit(eventsPrefix(schema), await foreign(schema, {}));
    await waitFor(async () => (await pool.query(`SELECT 1 FROM "${schema}".events`)).rowCount === 1, {
      what: 'the dead row',
    });
    const { rows } = await pool.query(
      `SELECT partition = "${schema}".partition_of(aggregate_type, aggregate_id) AS ok FROM "${schema}".events`,
    );
    expect(rows[0].ok).toBe(true);
    refuse = false;
    await replayDead(pool, { schema, eventIds: 'all', reason: 'test' });
    await waitFor(() => pub.received.some((m) => m.aggregateId === 'evil'), {
      timeoutMs: 8000,
      what: 'the replayed event',
    });
  });

  it('F5: headers that are not an object of strings: dead at decode', async () => {
    const schema = await fresh();
    const pub = new RecordingPublisher();
    const r = relay(schema, pub);
    await r.start();
    await emit(eventsPrefix(schema), await foreign(schema, { headers: '{"x-a":{"nested":[1,2]},"x-b":7}' }));
    await settlesPast(schema, r, pub, /headers\["x-a"\]: is a object/);
  });

  it('F8: a non-transactional events message is dead ("not transactional")', async () => {
    const schema = await fresh();
    const pub = new RecordingPublisher();
    const r = relay(schema, pub);
    await r.start();
    await emit(eventsPrefix(schema), await foreign(schema, { aggregateId: 'nontx' }), false);
    await settlesPast(schema, r, pub, /not transactional/);
  });

  it('F9: the slot check verdict of one database does not serve another', async () => {
    const schema = await fresh();
    const dbName = `cdc_fixwal_db_${randomBytes(3).toString('hex')}`;
    await pool.query(`CREATE DATABASE ${dbName}`);
    const other = new pg.Pool({
      connectionString: DATABASE_URL.replace(/\/[^/?]+(\?|$)/, `/${dbName}$1`),
      max: 2,
    });
    cleanups.push(async () => {
      await other.end();
      await pool.query(`DROP DATABASE IF EXISTS ${dbName}`);
    });
    await migrate(other, { schema, partitions: 4 });
    const e = { aggregateType: 'order', aggregateId: 'x', type: 'changed', payload: {} };
    await inTransaction(pool, (tx) => enqueue(tx, e, { schema, via: 'wal' }));
    await expect(inTransaction(other, (tx) => enqueue(tx, e, { schema, via: 'wal' }))).rejects.toMatchObject({
      code: 'TXO_CDC_NO_SLOT',
    });
  });
});
