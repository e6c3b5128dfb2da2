/**
 * The CDC stream keeps the polling relay's caller-version promise (docs/guarantees.md, Caller
 * versions), in both modes: a repeat goes dead (`sequence_repeat`) without blocking its aggregate,
 * a gap is bridged only after gapGraceMs with `sequenceBase`, a restart still knows what WAL mode
 * delivered. And one aggregate refused as unavailable while others are delivered does not hold
 * the slot: it is handed to the polling path.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type CdcRelay, createCdcRelay } from '../../src/cdc/relay.js';
import { dropCdcSlot, ensureCdcSlot } from '../../src/cdc/setup.js';
import { brokerUnavailable } from '../../src/errors.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import { inTransaction } from '../../src/producer/transaction.js';
import { migrate } from '../../src/schema/migrate.js';
import { DATABASE_URL } from '../helpers/env.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

const schema = `cdc_fixcv_${randomBytes(3).toString('hex')}`;
let pool: pg.Pool;
let admin: pg.Pool;
/** This database's default slot of the schema. */
let slot: string;
const relays: CdcRelay[] = [];

beforeAll(async () => {
  admin = new pg.Pool({ connectionString: DATABASE_URL, max: 5 });
  pool = new pg.Pool({ connectionString: DATABASE_URL, max: 10 });
  pool.on('error', () => undefined);
  await migrate(admin, { schema, partitions: 4 });
  slot = (await ensureCdcSlot(admin, { schema })).slot;
});
afterEach(async () => {
  await Promise.all(relays.splice(0).map((r) => r.stop({ timeout: 5000 })));
});
afterAll(async () => {
  await dropCdcSlot(admin, { schema }).catch(() => undefined);
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool.end();
  await admin.end();
});

function relay(publisher: RecordingPublisher, extra: object = {}): CdcRelay {
  const r = createCdcRelay({
    pool,
    publisher,
    schema,
    pollIntervalMs: 50,
    leaseMs: 3000,
    batchSize: 200,
    heartbeatMs: 300,
    silenceTimeoutMs: 5000,
    statusIntervalMs: 100,
    gapGraceMs: 1000,
    backoff: { baseMs: 50, capMs: 200 },
    ...extra,
  } as Parameters<typeof createCdcRelay>[0]);
  relays.push(r);
  return r;
}

function ev(agg: string, payload: unknown, sequence?: number): OutboxEvent {
  return {
    aggregateType: 'order',
    aggregateId: agg,
    type: 'changed',
    payload,
    ...(sequence === undefined ? {} : { sequence }),
  } as OutboxEvent;
}

async function put(e: OutboxEvent | OutboxEvent[], via: 'table' | 'wal'): Promise<void> {
  const list = Array.isArray(e) ? e : [e];
  await inTransaction(admin, (tx) => enqueue(tx, list, { schema, via }));
}

async function waitFor(
  check: () => Promise<boolean> | boolean,
  what: string,
  timeoutMs = 15_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

function published(p: RecordingPublisher, agg: string): string[] {
  return p.received
    .filter((m) => m.aggregateId === agg)
    .map((m) => `${m.sequence}:${JSON.parse(String(m.payload))}`);
}

async function rows(
  agg: string,
): Promise<{ sequence: number; status: string; attempts: number; last_error: string | null }[]> {
  const { rows } = await admin.query(
    `SELECT sequence::int, status, attempts, last_error FROM "${schema}".events WHERE aggregate_id = $1 ORDER BY sequence, id`,
    [agg],
  );
  return rows;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Started and streaming: rows written before would be the polled set's at start (another rule). */
async function streaming(r: CdcRelay): Promise<CdcRelay> {
  await r.start();
  await waitFor(() => r.stats().cdc.streaming, 'streaming');
  return r;
}

describe('caller versions through the stream', () => {
  for (const via of ['wal', 'table'] as const) {
    it(`${via}: a repeat and a regression go dead (sequence_repeat) and the aggregate carries on`, async () => {
      const agg = `rep-${via}`;
      const p = new RecordingPublisher();
      await streaming(relay(p));
      await put(ev(agg, 'a', 1), via);
      await put(ev(agg, 'b', 2), via);
      await waitFor(() => published(p, agg).length === 2, 'a, b');
      await put(ev(agg, 'b-repeat', 2), via);
      await put(ev(agg, 'a-regress', 1), via);
      await put(ev(agg, 'c', 3), via);
      await waitFor(() => published(p, agg).includes('3:c'), 'c');
      await waitFor(
        async () => (await rows(agg)).filter((r) => r.status === 'dead').length === 2,
        'two dead rows',
      );
      await sleep(300);
      expect(published(p, agg)).toEqual(['1:a', '2:b', '3:c']);
      const dead = await rows(agg);
      expect(dead.map((r) => [r.sequence, r.status])).toEqual([
        [1, 'dead'],
        [2, 'dead'],
      ]);
      for (const r of dead) expect(r.last_error).toContain('repeats one already delivered');
    }, 30_000);
  }

  for (const via of ['wal', 'table'] as const) {
    it(`${via}: versions 5, 3, 5, 6 of a new aggregate are published in rising order, the repeat dead`, async () => {
      // What the polling relay does with these rows: 3 and 5 are gaps (bridged after the grace,
      // with sequenceBase), the second 5 is a repeat, 6 follows.
      const agg = `f6-${via}`;
      const p = new RecordingPublisher();
      await streaming(relay(p));
      for (const [i, sequence] of [5, 3, 5, 6].entries()) await put(ev(agg, String(i), sequence), via);
      await waitFor(() => published(p, agg).some((m) => m.startsWith('6:')), '6');
      await waitFor(
        async () => (await rows(agg)).filter((r) => r.status === 'dead').length === 1,
        'a dead row',
      );
      await sleep(300);
      expect(published(p, agg)).toEqual(['3:1', '5:0', '6:3']);
      const mine = p.received.filter((m) => m.aggregateId === agg);
      expect(mine.map((m) => m.sequenceBase)).toEqual([2, 4, undefined]);
      expect((await rows(agg)).map((r) => [r.sequence, r.status])).toEqual([[5, 'dead']]);
    }, 30_000);
  }

  it('wal: a gap (1, 2, 4) is bridged after the grace, with sequenceBase 3', async () => {
    const p = new RecordingPublisher();
    await streaming(relay(p));
    const t0 = Date.now();
    await put(ev('gap', 'a', 1), 'wal');
    await put(ev('gap', 'b', 2), 'wal');
    await put(ev('gap', 'd', 4), 'wal');
    await waitFor(() => published(p, 'gap').length === 3, 'all three');
    const four = p.received.find((m) => m.aggregateId === 'gap' && m.sequence === 4)!;
    expect(four.sequenceBase).toBe(3);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1000);
  }, 30_000);

  it('wal: 1, 3, then 2 a moment later are published 1, 2, 3', async () => {
    const p = new RecordingPublisher();
    await streaming(relay(p, { gapGraceMs: 5000 }));
    await put(ev('late', 'a', 1), 'wal');
    await put(ev('late', 'c', 3), 'wal');
    await sleep(800);
    await put(ev('late', 'b', 2), 'wal');
    await waitFor(() => published(p, 'late').length === 3, 'all three');
    expect(published(p, 'late')).toEqual(['1:a', '2:b', '3:c']);
    expect(
      p.received.find((m) => m.aggregateId === 'late' && m.sequence === 3)?.sequenceBase,
    ).toBeUndefined();
  }, 30_000);

  it('wal: a restarted relay still knows the delivered versions (progress recorded)', async () => {
    const p1 = new RecordingPublisher();
    const r1 = await streaming(relay(p1));
    await put(ev('restart', 'a', 1), 'wal');
    await put(ev('restart', 'b', 2), 'wal');
    await waitFor(() => published(p1, 'restart').length === 2, 'a, b');
    await waitFor(async () => {
      const { rows } = await admin.query(
        `SELECT delivered_sequence::int AS d FROM "${schema}".aggregate_progress WHERE aggregate_id = 'restart'`,
      );
      return rows[0]?.d === 2;
    }, 'progress 2');
    await r1.stop();
    relays.splice(relays.indexOf(r1), 1);
    await put(ev('restart', 'b-repeat', 2), 'wal');
    await put(ev('restart', 'c', 3), 'wal');
    const p2 = new RecordingPublisher();
    await streaming(relay(p2));
    await waitFor(() => published(p2, 'restart').includes('3:c'), 'c');
    await sleep(300);
    expect(published(p2, 'restart')).toEqual(['3:c']);
  }, 30_000);

  it('default sequences in WAL mode write no progress', async () => {
    const p = new RecordingPublisher();
    await streaming(relay(p));
    await put([ev('plain', 'a'), ev('plain', 'b')], 'wal');
    await waitFor(() => published(p, 'plain').length === 2, 'a, b');
    await sleep(200);
    const { rows } = await admin.query(
      `SELECT 1 FROM "${schema}".aggregate_progress WHERE aggregate_id = 'plain'`,
    );
    expect(rows).toEqual([]);
  }, 30_000);
});

describe('one aggregate refused as unavailable', () => {
  it('is handed to the polling path (no attempt charged) while the others flow, and the slot moves on', async () => {
    const p = new RecordingPublisher();
    let down = true;
    p.verdict = (m) =>
      down && m.aggregateId === 'down'
        ? { ok: false, retryable: true, error: brokerUnavailable('topic down (test)') }
        : { ok: true };
    await streaming(relay(p, { maxInFlight: 50 }));
    await put(ev('down', 0), 'wal');
    await put(ev('down', 1), 'table');
    const { rows: at } = await admin.query('SELECT pg_current_wal_lsn()::text AS l');
    for (let i = 0; i < 100; i++) await put(ev(`up-${i % 10}`, i), i % 2 ? 'wal' : 'table');
    await waitFor(
      () => p.received.filter((m) => m.aggregateId.startsWith('up-')).length >= 100,
      'the others',
    );
    await waitFor(async () => {
      const { rows } = await admin.query(
        'SELECT confirmed_flush_lsn >= $2::pg_lsn AS past FROM pg_replication_slots WHERE slot_name = $1',
        [slot, at[0].l],
      );
      return rows[0]?.past === true;
    }, 'the slot confirmed past the refused events');
    const parked = await rows('down');
    expect(parked.map((x) => [x.sequence, x.status, x.attempts])).toEqual([
      [1, 'pending', 0],
      [2, 'pending', 0],
    ]);
    down = false;
    await waitFor(() => published(p, 'down').length === 2, 'down delivered after recovery', 20_000);
    expect(p.received.filter((m) => m.aggregateId === 'down').map((m) => m.sequence)).toEqual([1, 2]);
    await waitFor(async () => (await rows('down')).length === 0, 'table empty');
  }, 40_000);
});
