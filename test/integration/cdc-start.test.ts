/**
 * The CDC relay's start on the real PostgreSQL slot and NATS JetStream: a table-mode backlog
 * that streams again is delivered by the stream (not the polling path); rows that will not
 * stream again (parked behind a replayed dead event, or written before the slot existed) are
 * delivered by the polling path, in order with the aggregate's newer events.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type CdcRelay, createCdcRelay } from '../../src/cdc/relay.js';
import { dropCdcSlot, ensureCdcSlot, resolveCdcNames } from '../../src/cdc/setup.js';
import { brokerUnavailable, PublishError } from '../../src/errors.js';
import { replayDead } from '../../src/ops/dead-letter.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';
import { natsPublisher } from '../../src/publishers/nats/index.js';
import { enqueueVia, type Via } from '../helpers/cdc-enqueue.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { NATS_URL } from '../helpers/env.js';
import { HookedPublisher } from '../helpers/hooked-publisher.js';
import { deleteStream } from '../helpers/nats-stream.js';

let db: TestDb;
const relays: CdcRelay[] = [];
const cleanups: Array<() => Promise<void>> = [];

beforeAll(async () => {
  db = await createTestDb('cdc_startfast', { max: 30, partitions: 8 });
  await ensureCdcSlot(db.pool, { schema: db.schema });
});
afterEach(async () => {
  await Promise.all(relays.splice(0).map((r) => r.stop({ timeout: 5000 })));
  for (const f of cleanups.splice(0)) await f();
});
afterAll(async () => {
  if (db) {
    await dropSlot(db);
    await db.close();
  }
});

async function dropSlot(t: TestDb): Promise<void> {
  await dropCdcSlot(t.pool, { schema: t.schema }).catch(() => undefined);
}

/** A NATS stream of its own; `another()` is a second publisher into it (for the next relay). */
function broker(): { publisher: HookedPublisher; prefix: string; another: () => HookedPublisher } {
  const tag = randomBytes(4).toString('hex');
  const stream = `TXO_CDC_START_${tag}`;
  const prefix = `cdcstart${tag}`;
  const another = (): HookedPublisher =>
    new HookedPublisher(
      natsPublisher({ url: NATS_URL, stream, streamSubjects: [`${prefix}.>`], timeoutMs: 5000 }),
    );
  cleanups.push(() => deleteStream(NATS_URL, stream));
  return { publisher: another(), prefix, another };
}

function relay(t: TestDb, publisher: Publisher): CdcRelay {
  const r = createCdcRelay({
    pool: t.pool,
    publisher,
    schema: t.schema,
    pollIntervalMs: 50,
    leaseMs: 3000,
    batchSize: 1000,
    heartbeatMs: 500,
    silenceTimeoutMs: 5000,
    statusIntervalMs: 100,
    backoff: { baseMs: 50, capMs: 200 },
    ...(process.env['CDC_DEBUG'] ? { logger: debugLogger } : {}),
  });
  relays.push(r);
  return r;
}

const debugLogger = {
  debug: (o: object, m?: string) => console.log('DEBUG', m, JSON.stringify(o)),
  info: (o: object, m?: string) => console.log('INFO', m, JSON.stringify(o)),
  warn: (o: object, m?: string) => console.log('WARN', m, JSON.stringify(o)),
  error: (o: object, m?: string) => console.log('ERROR', m, JSON.stringify(o, Object.getOwnPropertyNames(o))),
};

function events(prefix: string, aggregate: string, count: number): OutboxEvent[] {
  return Array.from({ length: count }, (_, i) => ({
    aggregateType: 'order',
    aggregateId: aggregate,
    type: 'changed',
    topic: `${prefix}.order`,
    payload: { i },
  }));
}

function put(t: TestDb, list: OutboxEvent[], via: Via = 'table'): Promise<void> {
  return inTransaction(t.pool, (tx) => enqueueVia(tx, list, t.schema, via));
}

async function tableRows(
  t: TestDb,
): Promise<Array<{ aggregate_id: string; sequence: number; status: string; attempts: number }>> {
  const { rows } = await t.pool.query(
    `SELECT aggregate_id, sequence::int AS sequence, status, attempts FROM "${t.schema}".events ORDER BY id`,
  );
  return rows;
}

async function currentLsn(t: TestDb): Promise<string> {
  const { rows } = await t.pool.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
  return rows[0]!.lsn;
}

async function slotPast(t: TestDb, lsn: string): Promise<boolean> {
  const { rows } = await t.pool.query<{ past: boolean }>(
    'SELECT confirmed_flush_lsn >= $2::pg_lsn AS past FROM pg_replication_slots WHERE slot_name = $1',
    [(await resolveCdcNames(t.pool, { schema: t.schema })).slot, lsn],
  );
  return rows[0]?.past === true;
}

function sequencesOf(acked: readonly OutboxMessage[], aggregate: string): number[] {
  return acked.filter((m) => m.aggregateId === aggregate).map((m) => m.sequence);
}

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}

describe('CDC relay start', () => {
  it('streams a table-mode backlog committed while it was down, without the polling path', async () => {
    const { publisher, prefix } = broker();
    const aggregates = 250;
    const total = 30_000;
    for (let t = 0; t < total / 500; t++) {
      // Two events of each aggregate per transaction.
      const batch = Array.from({ length: 500 }, (_, i) => ({
        aggregateType: 'order',
        aggregateId: `a${String(i % aggregates).padStart(3, '0')}`,
        type: 'changed',
        topic: `${prefix}.order`,
        payload: { t, i },
      }));
      await put(
        db,
        batch.sort((x, y) => x.aggregateId.localeCompare(y.aggregateId)),
      );
    }
    const r = relay(db, publisher);
    let maxPolled = 0;
    const sampler = setInterval(() => {
      maxPolled = Math.max(maxPolled, r.stats().cdc.polled);
    }, 5);
    const started = performance.now();
    try {
      await r.start();
      await waitFor(() => publisher.acked.length >= total, { timeoutMs: 40_000, what: `${total} acks` });
    } finally {
      clearInterval(sampler);
    }
    const seconds = (performance.now() - started) / 1000;
    console.log(
      `backlog of ${total} table-mode events drained in ${seconds.toFixed(2)} s (${Math.round(total / seconds)}/s)`,
    );
    expect(new Set(publisher.acked.map((m) => m.eventId)).size).toBe(total);
    for (let a = 0; a < aggregates; a++) {
      const id = `a${String(a).padStart(3, '0')}`;
      expect(sequencesOf(publisher.acked, id)).toEqual(range(1, total / aggregates));
    }
    // The stream did it: no aggregate was ever the polling path's, nothing handed over.
    expect(maxPolled).toBe(0);
    expect(r.stats().cdc.handovers).toBe(0);
    await waitFor(async () => (await tableRows(db)).length === 0, { what: 'empty events table' });
  }, 60_000);

  it.each<Via>(['table', 'wal'])(
    'delivers rows parked behind a replayed dead event (%s mode) before the events committed while it was down',
    async (via) => {
      const { publisher, prefix, another } = broker();
      const parked = `parked-${via}`;
      publisher.fail = (m) =>
        m.aggregateId === parked && m.sequence === 5
          ? { ok: false, retryable: false, error: new PublishError('rejected', { retryable: false }) }
          : undefined;
      const r = relay(db, publisher);
      await r.start();
      await put(db, events(prefix, parked, 4), via);
      await put(db, [...events(prefix, parked, 3), ...events(prefix, `other-${via}`, 2)], via);
      const end = await currentLsn(db);
      await waitFor(
        async () => (await tableRows(db)).some((x) => x.aggregate_id === parked && x.status === 'dead'),
        {
          what: 'dead head',
        },
      );
      await waitFor(() => slotPast(db, end), { what: 'slot past the parked rows' });
      // Replayed: the head goes through, the next one is refused as unavailable (no attempt
      // counted); then the relay stops with A6, A7 pending, never attempted, confirmed past.
      publisher.fail = (m) =>
        m.aggregateId === parked && m.sequence === 6
          ? { ok: false, retryable: true, error: brokerUnavailable('down (test)') }
          : undefined;
      await replayDead(db.pool, {
        schema: db.schema,
        eventIds: 'all',
        filter: { aggregateId: parked },
        reason: 'test',
      });
      await waitFor(() => sequencesOf(publisher.acked, parked).includes(5), { what: 'replayed head' });
      await r.stop({ timeout: 5000 });
      expect(sequencesOf(publisher.acked, parked)).toEqual(range(1, 5));
      expect(
        (await tableRows(db))
          .filter((x) => x.aggregate_id === parked)
          .map((x) => [x.sequence, x.status, x.attempts]),
      ).toEqual([
        [6, 'pending', 0],
        [7, 'pending', 0],
      ]);
      await put(db, events(prefix, parked, 3), via);
      await put(db, events(prefix, `other-${via}`, 2), via);

      const second = another();
      const r2 = relay(db, second);
      await r2.start();
      await waitFor(() => sequencesOf(second.acked, parked).length >= 5, { what: 'parked aggregate' });
      expect(sequencesOf(second.acked, parked)).toEqual(range(6, 10));
      await waitFor(() => sequencesOf(second.acked, `other-${via}`).length >= 2, { what: 'other aggregate' });
      expect(sequencesOf(second.acked, `other-${via}`)).toEqual([3, 4]);
      await waitFor(async () => (await tableRows(db)).length === 0, { what: 'empty events table' });
    },
    40_000,
  );

  describe('rows written before the slot existed', () => {
    let fresh: TestDb;
    beforeAll(async () => {
      fresh = await createTestDb('cdc_startfast_pre', { max: 20, partitions: 4 });
    });
    afterAll(async () => {
      if (fresh) {
        await dropSlot(fresh);
        await fresh.close();
      }
    });

    it('delivers them in order with their aggregates’ later events, and those with no later event after the catch-up', async () => {
      const { publisher, prefix } = broker();
      // Before the slot: these rows are in the table and never stream.
      for (let k = 0; k < 10; k++) await put(fresh, events(prefix, `c${k}`, 4));
      for (let k = 0; k < 5; k++) await put(fresh, events(prefix, `d${k}`, 3));
      await ensureCdcSlot(fresh.pool, { schema: fresh.schema });
      // After it: they stream, behind the rows above.
      for (let k = 0; k < 10; k++) await put(fresh, events(prefix, `c${k}`, 3));
      for (let k = 0; k < 3; k++) await put(fresh, events(prefix, `s${k}`, 2));
      const r = relay(fresh, publisher);
      await r.start();
      await waitFor(() => publisher.acked.length >= 10 * 7 + 5 * 3 + 3 * 2, { what: 'every event' });
      for (let k = 0; k < 10; k++) expect(sequencesOf(publisher.acked, `c${k}`)).toEqual(range(1, 7));
      for (let k = 0; k < 5; k++) expect(sequencesOf(publisher.acked, `d${k}`)).toEqual(range(1, 3));
      for (let k = 0; k < 3; k++) expect(sequencesOf(publisher.acked, `s${k}`)).toEqual([1, 2]);
      await waitFor(async () => (await tableRows(fresh)).length === 0, { what: 'empty events table' });
      // The d aggregates' rows (and the c ones') were the polling path's; after it, the stream's again.
      await waitFor(() => r.stats().cdc.polled === 0, { what: 'every aggregate released' });
      for (let k = 0; k < 5; k++) await put(fresh, events(prefix, `d${k}`, 1));
      await waitFor(() => publisher.acked.length >= 10 * 7 + 5 * 4 + 3 * 2, { what: 'later events' });
      for (let k = 0; k < 5; k++) expect(sequencesOf(publisher.acked, `d${k}`)).toEqual(range(1, 4));
    }, 40_000);
  });
});
