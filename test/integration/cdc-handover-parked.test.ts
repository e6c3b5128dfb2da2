/**
 * The CDC relay on the real PostgreSQL and real NATS JetStream: aggregates refused as unavailable
 * while others are delivered are handed over to the polling path, and must reach the broker in
 * order, none dead. A chaos run on Kafka lost such events: a handed-over WAL-mode event's row was
 * written after its aggregate's later table-mode rows (mixed producers share aggregates), the
 * polling path's claim (id order, a batch at a time) held those later rows at a "gap", and the
 * gap probe (earlier events only among lower ids) bridged it: the WAL-mode event went dead as a
 * repeat. Also: a restart after the hand-over (slot confirmed past it, or not) with later events.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type CdcRelay, createCdcRelay } from '../../src/cdc/relay.js';
import { dropCdcSlot, ensureCdcSlot } from '../../src/cdc/setup.js';
import { brokerUnavailable } from '../../src/errors.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import type { Publisher } from '../../src/publishers/contract.js';
import { natsPublisher } from '../../src/publishers/nats/index.js';
import { TcpProxy } from '../../src/testing/tcp-proxy.js';
import { enqueueVia } from '../helpers/cdc-enqueue.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { DATABASE_URL, NATS_URL } from '../helpers/env.js';
import { HookedPublisher } from '../helpers/hooked-publisher.js';
import { deleteStream, orderViolations, readStream } from '../helpers/nats-stream.js';

let db: TestDb;
const relays: CdcRelay[] = [];
const cleanups: Array<() => Promise<void>> = [];

beforeAll(async () => {
  db = await createTestDb('cdc_handrestart', { max: 20, partitions: 8 });
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

function relay(publisher: Publisher, extra: Partial<Parameters<typeof createCdcRelay>[0]> = {}): CdcRelay {
  const r = createCdcRelay({
    pool: db.pool,
    publisher,
    schema: db.schema,
    pollIntervalMs: 50,
    leaseMs: 3000,
    batchSize: 50,
    heartbeatMs: 500,
    silenceTimeoutMs: 5000,
    statusIntervalMs: 100,
    backoff: { baseMs: 50, capMs: 200 },
    ...extra,
  });
  relays.push(r);
  return r;
}

function events(prefix: string, aggregate: string, count: number, from: number): OutboxEvent[] {
  return Array.from({ length: count }, (_, i) => ({
    aggregateType: 'order',
    aggregateId: aggregate,
    type: 'changed',
    topic: `${prefix}.order`,
    payload: { i: from + i },
  }));
}

async function put(list: OutboxEvent[], via: 'table' | 'wal' = 'wal'): Promise<void> {
  await inTransaction(db.pool, (tx) => enqueueVia(tx, list, db.schema, via));
}

/** The aggregate's rows in the table (of one status). */
async function rowsOf(aggregate: string, status?: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM "${db.schema}".events WHERE aggregate_id = $1 AND ($2::text IS NULL OR status = $2)`,
    [aggregate, status ?? null],
  );
  return rows[0]!.n;
}

describe('CDC relay: aggregates handed over as unavailable', () => {
  /**
   * `stop`: the first relay stops cleanly (the slot confirmed past the parked events). `cut`: its
   * replication connection is cut first and it never confirmed anything (status updates a minute
   * apart), as when it is killed while earlier events are unsettled: the new relay streams the
   * parked events (and the first relay's handover) again.
   */
  it.each(['stop', 'cut'] as const)(
    'delivers the parked events before the later ones a new relay streams: none lost, none dead (%s)',
    async (end) => {
      const url = new URL(DATABASE_URL);
      const proxy = await TcpProxy.start({ host: url.hostname, port: Number(url.port || 5432) });
      cleanups.push(() => proxy.close());
      const parked = `parked-${end}`;
      const busy = `busy-${end}`;
      const tag = randomBytes(4).toString('hex');
      const stream = `TXO_CDC_HANDRESTART_${tag}`;
      const prefix = `cdchandrestart${tag}`;
      cleanups.push(() => deleteStream(NATS_URL, stream));
      const natsOf = () =>
        new HookedPublisher(
          natsPublisher({ url: NATS_URL, stream, streamSubjects: [`${prefix}.>`], timeoutMs: 5000 }),
        );

      // The first relay: one aggregate's partition "has no leader" while the others are delivered.
      const first = natsOf();
      first.fail = (m) =>
        m.aggregateId === parked
          ? { ok: false, retryable: true, error: brokerUnavailable('no leader for the partition (test)') }
          : undefined;
      const r1 = relay(
        first,
        end === 'cut'
          ? {
              statusIntervalMs: 60_000,
              connection: {
                host: '127.0.0.1',
                port: proxy.port,
                user: decodeURIComponent(url.username || 'postgres'),
                database: url.pathname.slice(1) || 'test',
              },
            }
          : {},
      );
      await r1.start();
      for (let t = 0; t < 3; t++) await put(events(prefix, parked, 1, t));
      // Others delivered while `parked` is refused: after a few refused batches it is handed over.
      for (let t = 0; t < 20 && (await rowsOf(parked)) < 3; t++) {
        await put(events(prefix, busy, 5, t * 5));
        await new Promise((res) => setTimeout(res, 200));
      }
      await waitFor(async () => (await rowsOf(parked)) === 3, { what: 'parked events handed over' });
      expect(first.acked.filter((m) => m.aggregateId === parked)).toEqual([]);
      await waitFor(() => first.acked.filter((m) => m.aggregateId === busy).length >= 5, {
        what: 'busy acked',
      });
      if (end === 'cut') await proxy.cut();
      await r1.stop();
      relays.splice(relays.indexOf(r1), 1);

      // Later events of the aggregate, committed while no relay runs; then a new relay whose broker is well.
      await put(events(prefix, parked, 2, 3));
      await put(events(prefix, busy, 5, 1000));
      const second = natsOf();
      const r2 = relay(second);
      await r2.start();
      await waitFor(async () => (await rowsOf(parked)) === 0, {
        what: 'no parked row left',
        timeoutMs: 20_000,
      });
      await waitFor(() => second.acked.filter((m) => m.aggregateId === parked).length >= 5, {
        what: 'every parked event published',
        timeoutMs: 20_000,
      });
      expect(r2.stats().dead).toBe(0);
      const stored = (await readStream(NATS_URL, stream)).filter((s) => s.aggregateId === parked);
      expect(new Set(stored.map((s) => s.sequence))).toEqual(new Set([1, 2, 3, 4, 5]));
      expect(orderViolations(stored)).toEqual([]);
      expect(second.acked.filter((m) => m.aggregateId === parked).map((m) => m.sequence)).toEqual([
        1, 2, 3, 4, 5,
      ]);
    },
    60_000,
  );

  /**
   * One aggregate, events of both modes (the chaos run's mixed producers share aggregates): its
   * WAL-mode event is handed over (a new row) after its later table-mode events were inserted by
   * their producer, so its row's id is above theirs. The polling path claims in id order, a batch
   * at a time, and the gap probe looked for an earlier event only among lower ids: it bridged the
   * gap to the table-mode events and the WAL-mode event, still in the table, went dead as a repeat.
   */
  it('never bridges a gap to a later table-mode row while the handed-over WAL-mode row before it is in the table', async () => {
    const tag = randomBytes(4).toString('hex');
    const stream = `TXO_CDC_HANDRESTART_${tag}`;
    const prefix = `cdchandrestart${tag}`;
    cleanups.push(() => deleteStream(NATS_URL, stream));
    const mixed = `mixed-${tag}`;
    const busy = `busy-mixed-${tag}`;
    const publisher = new HookedPublisher(
      natsPublisher({ url: NATS_URL, stream, streamSubjects: [`${prefix}.>`], timeoutMs: 5000 }),
    );
    let refusing = true;
    publisher.fail = (m) =>
      refusing && m.aggregateId === mixed
        ? { ok: false, retryable: true, error: brokerUnavailable('no leader for the partition (test)') }
        : undefined;
    const r = relay(publisher, { batchSize: 2, gapGraceMs: 300 });
    await r.start();
    await put(events(prefix, mixed, 1, 0), 'wal');
    await put(events(prefix, mixed, 1, 1), 'table');
    await put(events(prefix, mixed, 1, 2), 'table');
    for (let t = 0; t < 40 && (await rowsOf(mixed)) < 3; t++) {
      await put(events(prefix, busy, 1, t));
      await new Promise((res) => setTimeout(res, 100));
    }
    await waitFor(async () => (await rowsOf(mixed)) === 3, { what: 'the WAL-mode event handed over' });
    refusing = false;
    await waitFor(async () => (await rowsOf(mixed, 'pending')) === 0, {
      what: 'no pending row of the aggregate',
    });
    expect(await rowsOf(mixed)).toBe(0);
    expect(r.stats().dead).toBe(0);
    expect(publisher.acked.filter((m) => m.aggregateId === mixed).map((m) => m.sequence)).toEqual([1, 2, 3]);
    const stored = (await readStream(NATS_URL, stream)).filter((s) => s.aggregateId === mixed);
    expect(orderViolations(stored)).toEqual([]);
  }, 60_000);
});
