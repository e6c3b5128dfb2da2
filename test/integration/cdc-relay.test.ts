/**
 * The CDC relay on the real PostgreSQL (logical replication slot, pgoutput) and real NATS
 * JetStream: delivery and order of a stream of events, the slot's confirmed position, the
 * handover to the polling path on failures (poison events, retries), dead replay, broker
 * outages, stop/start. Issue 14 tests 1, 5 and 8.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type CdcRelay, createCdcRelay } from '../../src/cdc/relay.js';
import { dropCdcSlot, ensureCdcSlot, resolveCdcNames } from '../../src/cdc/setup.js';
import { loadWalKey } from '../../src/cdc/wal-auth.js';
import { brokerUnavailable, PublishError } from '../../src/errors.js';
import { replayDead } from '../../src/ops/dead-letter.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';
import { natsPublisher } from '../../src/publishers/nats/index.js';
import { enqueueVia, type Via } from '../helpers/cdc-enqueue.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { NATS_URL } from '../helpers/env.js';
import { HookedPublisher } from '../helpers/hooked-publisher.js';
import { deleteStream, orderViolations, readStream } from '../helpers/nats-stream.js';

let db: TestDb;
const relays: CdcRelay[] = [];
const cleanups: Array<() => Promise<void>> = [];

beforeAll(async () => {
  db = await createTestDb('cdc_core', { max: 30, partitions: 8 });
  // The slot keeps what is committed from now on, relay running or not.
  await ensureCdcSlot(db.pool, { schema: db.schema });
});
afterEach(async () => {
  await Promise.all(relays.splice(0).map((r) => r.stop({ timeout: 5000 })));
  for (const f of cleanups.splice(0)) await f();
});
afterAll(async () => {
  if (db) {
    await dropCdcSlot(db.pool, { schema: db.schema }).catch(() => undefined);
    await db.close();
  }
});

function broker(tag = randomBytes(4).toString('hex')): {
  publisher: HookedPublisher;
  stream: string;
  prefix: string;
  tag: string;
} {
  const stream = `TXO_CDC_CORE_${tag}`;
  const prefix = `cdccore${tag}`;
  const publisher = new HookedPublisher(
    natsPublisher({ url: NATS_URL, stream, streamSubjects: [`${prefix}.>`], timeoutMs: 5000 }),
  );
  cleanups.push(() => deleteStream(NATS_URL, stream));
  return { publisher, stream, prefix, tag };
}

function relay(publisher: Publisher, extra: Partial<Parameters<typeof createCdcRelay>[0]> = {}): CdcRelay {
  const r = createCdcRelay({
    pool: db.pool,
    publisher,
    schema: db.schema,
    pollIntervalMs: 50,
    leaseMs: 3000,
    batchSize: 500,
    heartbeatMs: 500,
    silenceTimeoutMs: 5000,
    statusIntervalMs: 100,
    backoff: { baseMs: 50, capMs: 200 },
    ...(process.env['CDC_DEBUG'] ? { logger: debugLogger } : {}),
    ...extra,
  });
  relays.push(r);
  return r;
}

const debugLogger = {
  debug: () => {},
  info: (o: object, m?: string) => console.log('INFO', m, JSON.stringify(o)),
  warn: (o: object, m?: string) => console.log('WARN', m, JSON.stringify(o)),
  error: (o: object, m?: string) => console.log('ERROR', m, JSON.stringify(o, Object.getOwnPropertyNames(o))),
};

function events(prefix: string, aggregate: string, count: number, type = 'changed'): OutboxEvent[] {
  return Array.from({ length: count }, (_, i) => ({
    aggregateType: 'order',
    aggregateId: aggregate,
    type,
    topic: `${prefix}.order`,
    payload: { i },
  }));
}

async function put(list: OutboxEvent[], via: Via = 'table'): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await inTransaction(db.pool, (tx) => enqueueVia(tx, list, db.schema, via));
      return;
    } catch (error) {
      // Concurrent producers of shared aggregates may deadlock on their sequence rows: retry, as an app would.
      if ((error as { code?: string }).code !== '40P01' || attempt >= 5) throw error;
    }
  }
}

async function tableRows(): Promise<
  Array<{ aggregate_id: string; sequence: string; status: string; attempts: number }>
> {
  const { rows } = await db.pool.query(
    `SELECT aggregate_id, sequence::text AS sequence, status, attempts FROM "${db.schema}".events ORDER BY id`,
  );
  return rows;
}

async function currentLsn(): Promise<string> {
  const { rows } = await db.pool.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
  return rows[0]!.lsn;
}

/** The slot's confirmed position reached `lsn`. */
async function slotPast(lsn: string): Promise<boolean> {
  const { rows } = await db.pool.query<{ past: boolean }>(
    'SELECT confirmed_flush_lsn >= $2::pg_lsn AS past FROM pg_replication_slots WHERE slot_name = $1',
    [(await resolveCdcNames(db.pool, { schema: db.schema })).slot, lsn],
  );
  return rows[0]?.past === true;
}

/** Sequences acknowledged per aggregate, in ack order. */
function sequencesOf(acked: readonly OutboxMessage[], aggregate: string): number[] {
  return acked.filter((m) => m.aggregateId === aggregate).map((m) => m.sequence);
}

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}

describe('CDC relay', () => {
  it('streams 20,000 events of several producers in per-aggregate order and confirms the slot past them', async () => {
    const { publisher, stream, prefix } = broker();
    const r = relay(publisher);
    await r.start();
    const producers = 4;
    const perProducer = 5000;
    const aggregates = 200;
    await Promise.all(
      Array.from({ length: producers }, async (_, p) => {
        for (let t = 0; t < perProducer / 100; t++) {
          // Aggregates in one order in every transaction: producers sharing them never deadlock.
          const batch = Array.from({ length: 100 }, (_, i) => ({
            aggregateType: 'order',
            aggregateId: `a${String((p * 7 + t * 13 + i) % aggregates).padStart(3, '0')}`,
            type: 'changed',
            topic: `${prefix}.order`,
            payload: { p, t, i },
          }));
          await put(batch.sort((x, y) => x.aggregateId.localeCompare(y.aggregateId)));
        }
      }),
    );
    const end = await currentLsn();
    const total = producers * perProducer;
    await waitFor(() => publisher.acked.length >= total, { timeoutMs: 45_000, what: `${total} acks` });
    await waitFor(async () => (await tableRows()).length === 0, { what: 'empty events table' });
    await waitFor(() => slotPast(end), { what: 'slot confirmed past the last commit' });
    const stored = await readStream(NATS_URL, stream);
    expect(stored).toHaveLength(total);
    expect(new Set(stored.map((s) => s.eventId)).size).toBe(total);
    expect(orderViolations(stored)).toEqual([]);
    expect(r.stats().published).toBe(total);
    expect(r.stats().cdc.streaming).toBe(true);
  }, 60_000);

  it.each<Via>(['table', 'wal'])(
    'parks a poison event’s aggregate (%s mode), keeps the rest flowing, and replays it in order',
    async (via) => {
      const { publisher, prefix } = broker();
      const poison = `poison-${via}`;
      publisher.fail = (m) =>
        m.aggregateId === poison && m.sequence === 2
          ? { ok: false, retryable: false, error: new PublishError('rejected', { retryable: false }) }
          : undefined;
      const r = relay(publisher);
      await r.start();
      await put(events(prefix, poison, 2, 'first'), via);
      for (let k = 0; k < 5; k++)
        await put([...events(prefix, `ok-${via}-${k}`, 3), ...events(prefix, poison, 1)], via);
      const end = await currentLsn();
      await waitFor(
        () => publisher.acked.filter((m) => m.aggregateId.startsWith(`ok-${via}`)).length === 15,
        {
          what: 'the other aggregates',
        },
      );
      await waitFor(() => slotPast(end), { what: 'slot past the poison' });
      // The poison is dead, its aggregate's later events parked in the table, none published.
      const rows = await tableRows();
      expect(
        rows.filter((x) => x.aggregate_id === poison).map((x) => [Number(x.sequence), x.status]),
      ).toEqual([
        [2, 'dead'],
        [3, 'pending'],
        [4, 'pending'],
        [5, 'pending'],
        [6, 'pending'],
        [7, 'pending'],
      ]);
      expect(sequencesOf(publisher.acked, poison)).toEqual([1]);
      // Later events of other aggregates still stream.
      await put(events(prefix, `ok-${via}-late`, 2), via);
      await waitFor(() => sequencesOf(publisher.acked, `ok-${via}-late`).length === 2, {
        what: 'late events',
      });
      expect(sequencesOf(publisher.acked, poison)).toEqual([1]);

      publisher.fail = () => undefined;
      const replayed = await replayDead(db.pool, {
        schema: db.schema,
        eventIds: 'all',
        filter: { aggregateId: poison },
        reason: 'test',
      });
      expect(replayed).toHaveLength(1);
      // New events of the parked aggregate, enqueued while it is replayed, come after it.
      await put(events(prefix, poison, 2), via);
      await waitFor(() => sequencesOf(publisher.acked, poison).length === 9, { what: 'replayed aggregate' });
      expect(sequencesOf(publisher.acked, poison)).toEqual(range(1, 9));
      await waitFor(async () => (await tableRows()).length === 0, { what: 'empty events table' });
      for (let k = 0; k < 5; k++) expect(sequencesOf(publisher.acked, `ok-${via}-${k}`)).toEqual([1, 2, 3]);
      expect(r.stats().cdc.handovers).toBeGreaterThan(0);
    },
    40_000,
  );

  it.each<Via>(['table', 'wal'])(
    'retries a failed publish in order (%s mode)',
    async (via) => {
      const { publisher, prefix } = broker();
      const agg = `retry-${via}`;
      let failures = 0;
      publisher.fail = (m) => {
        if (m.aggregateId !== agg || m.sequence !== 2 || failures >= 2) return undefined;
        failures += 1;
        return { ok: false, retryable: true, error: new PublishError('try again', { retryable: true }) };
      };
      const r = relay(publisher);
      await r.start();
      await put(events(prefix, agg, 2), via);
      await put(events(prefix, agg, 3), via);
      await waitFor(() => sequencesOf(publisher.acked, agg).length === 5, { what: 'retried aggregate' });
      expect(failures).toBe(2);
      expect(sequencesOf(publisher.acked, agg)).toEqual([1, 2, 3, 4, 5]);
      const ack2 = publisher.acked.find((m) => m.aggregateId === agg && m.sequence === 2);
      expect(ack2?.attempts).toBe(2);
      await waitFor(async () => (await tableRows()).length === 0, { what: 'empty events table' });
      // Back to the stream: the aggregate's next event is streamed, not polled.
      const handovers = r.stats().cdc.handovers;
      await waitFor(() => r.stats().cdc.polled === 0, { what: 'aggregate released' });
      await put(events(prefix, agg, 1), via);
      await waitFor(() => sequencesOf(publisher.acked, agg).length === 6, { what: 'streamed again' });
      expect(r.stats().cdc.handovers).toBe(handovers);
    },
    30_000,
  );

  it('keeps an unreadable (authenticated) WAL-mode message as a dead event and streams on', async () => {
    const { publisher, prefix } = broker();
    const r = relay(publisher);
    await r.start();
    // Format 99 from a holder of the producer's rights (the schema's key): kept, without its MAC.
    const { key } = await loadWalKey(db.pool, db.schema, `"${db.schema}"`);
    const unreadable = Buffer.from([99, 1, 2, 3]);
    await inTransaction(db.pool, async (tx) => {
      await tx.query('SELECT pg_logical_emit_message(true, $1, $2::bytea)', [
        `tx-outbox:${db.schema}`,
        Buffer.concat([unreadable, key.mac(unreadable)]),
      ]);
      await enqueueVia(tx, events(prefix, 'after-garbage', 1), db.schema, 'wal');
    });
    await waitFor(() => sequencesOf(publisher.acked, 'after-garbage').length === 1, {
      what: 'the next event',
    });
    await waitFor(async () => (await tableRows()).length === 1, { what: 'the dead row' });
    const { rows } = await db.pool.query(
      `SELECT aggregate_type, status, payload_bytes, last_error FROM "${db.schema}".events`,
    );
    expect(rows[0]).toMatchObject({ aggregate_type: 'tx-outbox.undecodable', status: 'dead' });
    expect(rows[0].payload_bytes).toEqual(Buffer.from([99, 1, 2, 3]));
    expect(rows[0].last_error).toMatch(/^permanent: /);
    await db.pool.query(`DELETE FROM "${db.schema}".events`);
  }, 20_000);

  it('never lets a polled aggregate’s table row overtake its WAL-mode event still on its way in', async () => {
    const { publisher, prefix } = broker();
    let failedOnce = false;
    publisher.fail = (m) => {
      if (m.aggregateId !== 'overtake' || m.sequence !== 1 || failedOnce) return undefined;
      failedOnce = true;
      return { ok: false, retryable: true, error: new PublishError('once', { retryable: true }) };
    };
    // The stream is busy publishing a slow event while the aggregate's next two arrive.
    publisher.delay = (m) => (m.aggregateId === 'slow' ? 2500 : 0);
    const r = relay(publisher, { gapGraceMs: 200 });
    await r.start();
    await put(events(prefix, 'overtake', 1), 'wal');
    await waitFor(() => r.stats().retried === 1, { what: 'first attempt failed' });
    await put(events(prefix, 'slow', 1), 'table');
    await new Promise((res) => setTimeout(res, 300));
    await put(events(prefix, 'overtake', 1), 'wal');
    await put(events(prefix, 'overtake', 1), 'table');
    await waitFor(() => sequencesOf(publisher.acked, 'overtake').length >= 3, { what: 'three acks' });
    expect(sequencesOf(publisher.acked, 'overtake')).toEqual([1, 2, 3]);
    expect(r.stats().gapsBridged).toBe(0);
  }, 20_000);

  it('streams WAL-mode and table-mode events of one transaction in order', async () => {
    const { publisher, stream, prefix } = broker();
    const r = relay(publisher);
    await r.start();
    for (let t = 0; t < 20; t++) {
      await inTransaction(db.pool, async (tx) => {
        for (let k = 0; k < 10; k++) {
          await enqueueVia(tx, events(prefix, `mix-${k}`, 1), db.schema, (t + k) % 2 === 0 ? 'wal' : 'table');
        }
      });
    }
    const end = await currentLsn();
    await waitFor(() => publisher.acked.length === 200, { what: '200 acks' });
    await waitFor(() => slotPast(end), { what: 'slot past the mix' });
    const stored = await readStream(NATS_URL, stream);
    expect(stored).toHaveLength(200);
    expect(orderViolations(stored)).toEqual([]);
    expect(await tableRows()).toEqual([]);
  }, 30_000);

  it('starts with table rows behind unconfirmed WAL-mode events of one aggregate and delivers all in order', async () => {
    const { publisher, prefix } = broker();
    // No relay runs: the slot keeps them. The table holds only the table-mode ones.
    for (let k = 0; k < 3; k++) {
      await put(events(prefix, 'behind', 2), 'wal');
      await put(events(prefix, 'behind', 1), 'table');
    }
    const r = relay(publisher, { gapGraceMs: 30_000 });
    const started = Date.now();
    await r.start();
    await waitFor(() => sequencesOf(publisher.acked, 'behind').length >= 9, { what: 'all nine' });
    expect(sequencesOf(publisher.acked, 'behind')).toEqual(range(1, 9));
    // Not by bridging a gap after its grace.
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(r.stats().gapsBridged).toBe(0);
    await waitFor(async () => (await tableRows()).length === 0, { what: 'empty events table' });
  }, 30_000);

  it('loses nothing and keeps order through a broker outage, and resumes after stop/start', async () => {
    const { publisher, stream, prefix, tag } = broker();
    let down = false;
    publisher.fail = () =>
      down ? { ok: false, retryable: true, error: brokerUnavailable('broker down (test)') } : undefined;
    const r = relay(publisher);
    await r.start();
    const producing = (async () => {
      for (let t = 0; t < 40; t++) {
        await put(
          Array.from({ length: 25 }, (_, i) => ({
            aggregateType: 'order',
            aggregateId: `out-${i % 20}`,
            type: 'changed',
            topic: `${prefix}.order`,
            payload: { t, i },
          })),
          t % 2 === 0 ? 'table' : 'wal',
        );
        await new Promise((res) => setTimeout(res, 50));
      }
    })();
    await new Promise((res) => setTimeout(res, 300));
    down = true;
    await new Promise((res) => setTimeout(res, 2000));
    down = false;
    await producing;
    await waitFor(() => publisher.acked.length === 1000, { what: '1000 acks after the outage' });
    await r.stop();
    relays.splice(relays.indexOf(r), 1);

    // Committed while no relay runs; a new relay resumes from the slot's confirmed position.
    await put(events(prefix, 'out-0', 5), 'table');
    await put(events(prefix, 'out-1', 5), 'wal');
    const again = broker(tag);
    const r2 = relay(again.publisher);
    await r2.start();
    const resumed = Date.now();
    await waitFor(() => again.publisher.acked.length >= 10, { what: 'resumed' });
    // out-0's table rows follow WAL-mode deliveries (no progress written): no gap grace waited out.
    expect(Date.now() - resumed).toBeLessThan(5000);
    expect(r2.stats().gapsBridged).toBe(0);
    await waitFor(async () => (await tableRows()).length === 0, { what: 'empty events table' });
    const stored = await readStream(NATS_URL, stream);
    expect(new Set(stored.map((s) => s.eventId)).size).toBe(1010);
    // Nothing was confirmed unsettled: the second relay republished nothing of the first's.
    expect(stored).toHaveLength(1010);
    expect(orderViolations(stored)).toEqual([]);
    expect(r.stats().unavailable).toBeGreaterThan(0);
  }, 40_000);
});
