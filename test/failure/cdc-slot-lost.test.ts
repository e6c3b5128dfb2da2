/**
 * A slot invalidated under a running CDC relay (review rev-takeover finding 2c; rt/scen7.sh): on a
 * private cluster with a tiny max_slot_wal_keep_size, the relay holds an event it cannot deliver
 * (broker unavailable, so nothing is confirmed), other WAL pushes the slot past the bound, and
 * PostgreSQL invalidates it. The relay must say TXO_CDC_SLOT_LOST with the full recovery text,
 * release every lease (the recovery's polling relay needs them), stop streaming, stay up, not ready.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CdcRelay, createCdcRelay } from '../../src/cdc/relay.js';
import { ensureCdcSlot, resolveCdcNames } from '../../src/cdc/setup.js';
import { LOOP_ERRORS_NOT_READY } from '../../src/core/relay-health.js';
import { brokerUnavailable } from '../../src/errors.js';
import { enqueue } from '../../src/producer/enqueue.js';
import { migrate } from '../../src/schema/migrate.js';
import { inTransaction, waitFor } from '../helpers/db.js';
import { logRecorder } from '../helpers/log-recorder.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';
import { PrivatePostgres } from '../helpers/private-postgres.js';

const SCHEMA = 'cdc_fixops_lost';
let server: PrivatePostgres;
let pool: pg.Pool;
let relay: CdcRelay | undefined;

beforeAll(async () => {
  server = await PrivatePostgres.start({
    settings: { max_slot_wal_keep_size: '1MB', max_wal_size: '32MB', min_wal_size: '32MB' },
  });
  pool = new pg.Pool({ connectionString: server.url(), max: 8 });
  await migrate(pool, { schema: SCHEMA, partitions: 4 });
  await ensureCdcSlot(pool, { schema: SCHEMA });
}, 120_000);

afterAll(async () => {
  await relay?.stop({ timeout: 2000 }).catch(() => undefined);
  await pool?.end();
  await server?.destroy();
}, 60_000);

describe('cdc failure: the slot is lost while the relay runs', () => {
  it('reports TXO_CDC_SLOT_LOST with the recovery, releases the leases, stays up and not ready', async () => {
    const { lines, logger } = logRecorder();
    const publisher = new RecordingPublisher();
    let attempts = 0;
    publisher.verdict = () => {
      attempts += 1;
      return { ok: false, retryable: true, error: brokerUnavailable('broker down (test)') };
    };
    relay = createCdcRelay({
      schema: SCHEMA,
      pool,
      publisher,
      relayId: 'lost',
      logger,
      leaseMs: 3000,
      heartbeatMs: 500,
      silenceTimeoutMs: 4000,
      pollIntervalMs: 50,
    });
    await relay.start();
    const r = relay;
    await waitFor(() => r.stats().cdc.streaming, { what: 'streaming' });
    await inTransaction(pool, (tx) =>
      enqueue(tx, [{ aggregateType: 'order', aggregateId: '1', type: 'created', payload: {} }], {
        schema: SCHEMA,
      }),
    );
    await waitFor(() => attempts > 0, { what: 'a refused publish' });
    // WAL the slot cannot keep: past max_slot_wal_keep_size, a checkpoint invalidates it.
    await pool.query('CREATE TABLE junk (x text)');
    await waitFor(
      async () => {
        await pool.query(`INSERT INTO junk SELECT repeat('x', 1000) FROM generate_series(1, 20000)`);
        await pool.query('SELECT pg_switch_wal()');
        await pool.query('CHECKPOINT');
        const { rows } = await pool.query<{ wal_status: string }>(
          `SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1`,
          [(await resolveCdcNames(pool, { schema: SCHEMA })).slot],
        );
        return rows[0]?.wal_status === 'lost';
      },
      { timeoutMs: 30_000, intervalMs: 100, what: 'the slot lost' },
    );
    await waitFor(
      () => lines.some((l) => (l.obj['err'] as { code?: string })?.code === 'TXO_CDC_SLOT_LOST'),
      {
        timeoutMs: 20_000,
        what: 'TXO_CDC_SLOT_LOST logged',
      },
    );
    const line = lines.find((l) => (l.obj['err'] as { code?: string })?.code === 'TXO_CDC_SLOT_LOST')!;
    expect(line.level).toBe('error');
    const message = (line.obj['err'] as Error).message;
    expect(message).toMatch(/confirmed up to LSN [0-9A-F]+\/[0-9A-F]+/);
    expect(message).toContain('may be missing from the broker');
    expect(message).toContain('tx-outbox cdc drop-slot --yes');
    await waitFor(
      async () => {
        const { rows } = await pool.query(
          `SELECT 1 FROM ${SCHEMA}.partitions WHERE owner IS NOT NULL AND lease_until >= now()`,
        );
        return rows.length === 0;
      },
      { timeoutMs: 10_000, what: 'every lease released' },
    );
    await new Promise((resolve) => setTimeout(resolve, 2000));
    const health = r.health();
    expect(health.running).toBe(true);
    expect(health.loopErrorsInARow).toBeGreaterThanOrEqual(LOOP_ERRORS_NOT_READY);
    expect(health.partitions).toBe(0);
    expect(r.stats().cdc.streaming).toBe(false);
    // Checked again every minute, not in a loop: one slot-lost line so far (before it, one for the
    // walsender PostgreSQL ended to invalidate the slot).
    const lost = lines.filter((l) => l.level === 'error' && /slot lost/.test(l.msg));
    expect(lost).toHaveLength(1);
  }, 90_000);
});
