/**
 * Issue 24, item 13: the slot gauges report what PostgreSQL says the slot holds back. A CDC relay
 * whose broker is down holds events it cannot confirm (the reader stopped at maxInFlight) while
 * the application writes WAL of its own: `tx_outbox_cdc_slot_lag_bytes` must follow
 * `pg_current_wal_lsn() − confirmed_flush_lsn` and `tx_outbox_cdc_slot_retained_bytes`
 * `pg_current_wal_lsn() − restart_lsn`, not what the relay's stream saw. The slot never moves past
 * the held events meanwhile (keepalives arrive, but something is in flight), and once the broker is
 * back every event is delivered. On a private cluster: its WAL is this test's alone.
 */
import pg from 'pg';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CdcRelay, createCdcRelay } from '../../src/cdc/relay.js';
import { brokerUnavailable } from '../../src/errors.js';
import { migrate } from '../../src/schema/migrate.js';
import { cdcEvents, cdcNames, countIds, produce, slotState } from '../helpers/cdc.js';
import { waitFor } from '../helpers/db.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';
import { sample } from '../helpers/metrics.js';
import { PrivatePostgres } from '../helpers/private-postgres.js';

const SCHEMA = 'slot_lag';
/** WAL written between a sample and the reading it is compared with (heartbeats, lease renewals). */
const TOLERANCE_BYTES = 256 * 1024;

let server: PrivatePostgres;
let pool: pg.Pool;
let relay: CdcRelay | undefined;

beforeAll(async () => {
  server = await PrivatePostgres.start();
  pool = new pg.Pool({ connectionString: server.url(), max: 8 });
  await migrate(pool, { schema: SCHEMA, partitions: 4 });
  await pool.query(`CREATE TABLE business (id bigserial PRIMARY KEY, filler text NOT NULL)`);
}, 120_000);
afterAll(async () => {
  await relay?.stop({ timeout: 5000 });
  await pool?.end();
  await server?.destroy();
}, 60_000);

/** The slot's lag and retained WAL as `cdc status` reads them, bytes. */
async function slotBytes(slot: string): Promise<{ lag: number; retained: number }> {
  const { rows } = await pool.query(
    `SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::float8 AS lag,
            (pg_current_wal_lsn() - restart_lsn)::float8 AS retained
       FROM pg_replication_slots WHERE slot_name = $1`,
    [slot],
  );
  return rows[0];
}

describe('cdc failure: the slot held back while the broker is down', () => {
  it('the lag and retained gauges follow pg_replication_slots; nothing held is confirmed or lost', async () => {
    const registry = new Registry();
    const publisher = new RecordingPublisher();
    let down = false;
    publisher.verdict = () =>
      down ? { ok: false, retryable: true, error: brokerUnavailable('broker down (test)') } : { ok: true };
    relay = createCdcRelay({
      pool,
      publisher,
      schema: SCHEMA,
      metrics: registry,
      backlogIntervalMs: 200,
      heartbeatMs: 500,
      leaseMs: 2000,
      maxInFlight: 100,
      batchSize: 50,
      statusIntervalMs: 100,
      backoff: { baseMs: 50, capMs: 200 },
    });
    await relay.start();
    await waitFor(() => relay!.stats().cdc.streaming, { what: 'streaming' });
    const { slot } = await cdcNames(pool, SCHEMA);

    const first = await produce(pool, SCHEMA, cdcEvents('lag', 200, 20), { perTx: 100 });
    await waitFor(() => publisher.received.length === 200, { what: 'the first events delivered' });

    down = true;
    const held = await produce(pool, SCHEMA, cdcEvents('lag', 300, 20, 200), { perTx: 100 });
    await waitFor(() => relay!.stats().unavailable > 0, { what: 'publishes refused' });
    // About 8 MB of the application's own WAL, in no publication.
    for (let i = 0; i < 20; i++)
      await pool.query(`INSERT INTO business (filler) SELECT repeat('x', 300) FROM generate_series(1, 1000)`);

    let gauges = { lag: 0, retained: 0 };
    let pgSays = { lag: 0, retained: 0 };
    const close = () =>
      Math.abs(gauges.lag - pgSays.lag) <= TOLERANCE_BYTES &&
      Math.abs(gauges.retained - pgSays.retained) <= TOLERANCE_BYTES;
    await waitFor(
      async () => {
        gauges = {
          lag: await sample(registry, 'tx_outbox_cdc_slot_lag_bytes'),
          retained: await sample(registry, 'tx_outbox_cdc_slot_retained_bytes'),
        };
        pgSays = await slotBytes(slot);
        return close();
      },
      { timeoutMs: 5000, intervalMs: 100 },
    ).catch(() => undefined);
    const stats = relay.stats().cdc;
    const state = await slotState(pool, slot);
    console.info(
      `cdc slot lag: pg_replication_slots lag ${pgSays.lag} B, retained ${pgSays.retained} B; gauges lag ${gauges.lag} B, retained ${gauges.retained} B; stats ${JSON.stringify({ lagBytes: stats.lagBytes, retainedBytes: stats.retainedBytes })}`,
    );
    expect(pgSays.lag, 'the slot is held back by megabytes').toBeGreaterThan(4 * 1024 * 1024);
    expect(Math.abs(gauges.lag - pgSays.lag), 'tx_outbox_cdc_slot_lag_bytes off by').toBeLessThanOrEqual(
      TOLERANCE_BYTES,
    );
    expect(
      Math.abs(gauges.retained - pgSays.retained),
      'tx_outbox_cdc_slot_retained_bytes off by',
    ).toBeLessThanOrEqual(TOLERANCE_BYTES);
    expect(gauges.retained).toBeGreaterThanOrEqual(gauges.lag);
    expect(Math.abs(stats.lagBytes - pgSays.lag)).toBeLessThanOrEqual(TOLERANCE_BYTES);
    expect(Math.abs(stats.retainedBytes - pgSays.retained)).toBeLessThanOrEqual(TOLERANCE_BYTES);
    // Keepalives carried the WAL end past the held events: none of it was confirmed.
    expect(state.confirmed).toBeLessThan(held[0]!.afterLsn);

    down = false;
    await waitFor(() => publisher.received.length >= countIds([...first, ...held]), {
      what: 'every event delivered once the broker is back',
    });
    const delivered = new Set(publisher.received.map((m) => m.eventId));
    for (const c of [...first, ...held]) for (const id of c.ids) expect(delivered.has(id)).toBe(true);
    await waitFor(async () => (await slotBytes(slot)).lag < TOLERANCE_BYTES, {
      what: 'the slot confirmed past the application writes once nothing is in flight',
    });
  }, 60_000);
});
