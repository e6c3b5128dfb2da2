import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cdcNames, ensureCdcSlot, resolveCdcNames, takeOverSlot } from '../../src/cdc/setup.js';
import type { Logger } from '../../src/logger.js';
import { NOOP_RELAY_METRICS } from '../../src/metrics/relay-metrics.js';
import { PartitionLeases } from '../../src/relay/leases.js';
import { quoteSchema } from '../../src/schema/identifiers.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { logRecorder } from '../helpers/log-recorder.js';
import { dropSlotQuietly, holdSlot } from '../helpers/slot-holder.js';

const PARTITIONS = 16;
let db: TestDb;
const pools: pg.Pool[] = [];
const slot = () => `txo_${db.schema}_lease`;

beforeAll(async () => {
  db = await createTestDb('cdc_control_leases', { partitions: PARTITIONS });
});

afterAll(async () => {
  await dropSlotQuietly(db.pool, slot());
  await db.pool.query(`DROP PUBLICATION IF EXISTS "${cdcNames({ schema: db.schema }).publication}"`);
  await Promise.all(pools.map((p) => p.end()));
  await db.close();
});

function ownPool(): pg.Pool {
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  pools.push(pool);
  return pool;
}

function leases(
  id: string,
  leaseMs: number,
  logger: Logger,
  exclusive: boolean,
  pool = ownPool(),
): PartitionLeases {
  return new PartitionLeases(
    pool,
    quoteSchema(db.schema),
    id,
    leaseMs,
    async () => PARTITIONS,
    logger,
    NOOP_RELAY_METRICS,
    { exclusive },
  );
}

async function owners(): Promise<Map<string | null, number>> {
  const { rows } = await db.pool.query<{ owner: string | null; n: number }>(
    `SELECT CASE WHEN lease_until >= now() THEN owner END AS owner, count(*)::int AS n
     FROM "${db.schema}".partitions GROUP BY 1`,
  );
  return new Map(rows.map((r) => [r.owner, r.n]));
}

async function resetPartitions(): Promise<void> {
  await db.pool.query(`UPDATE "${db.schema}".partitions SET owner = NULL, lease_until = '-infinity'`);
  await db.pool.query(`DELETE FROM "${db.schema}".relays`);
}

describe('exclusive leases', () => {
  it('two exclusive relays racing 100 times: one takes every partition, the other none, never a split', async () => {
    const silent = logRecorder().logger;
    const a = leases('cdc-a', 60_000, silent, true);
    const b = leases('cdc-b', 60_000, silent, true);
    const wins = { a: 0, b: 0 };
    for (let round = 0; round < 100; round++) {
      await resetPartitions();
      a.forget();
      b.forget();
      const [aStandby, bStandby] = await Promise.all([a.rebalance(), b.rebalance()]);
      expect([a.size, b.size].sort((x, y) => x - y)).toEqual([0, PARTITIONS]);
      expect(aStandby).toBe(a.size === 0);
      expect(bStandby).toBe(b.size === 0);
      const held = await owners();
      const winner = a.size === PARTITIONS ? 'cdc-a' : 'cdc-b';
      expect([...held.entries()]).toEqual([[winner, PARTITIONS]]);
      wins[a.size === PARTITIONS ? 'a' : 'b'] += 1;
      // The loser stays a standby while the winner holds them.
      expect(await (a.size === 0 ? a : b).rebalance()).toBe(true);
      expect((a.size === 0 ? a : b).size).toBe(0);
    }
    expect(wins.a + wins.b).toBe(100);
  });

  it("a holder's expired leases go whole to the standby within leaseMs + the renew cadence, under new epochs", async () => {
    await resetPartitions();
    const leaseMs = 600;
    const silent = logRecorder().logger;
    const holder = leases('cdc-holder', leaseMs, silent, true);
    const standby = leases('cdc-standby', leaseMs, silent, true);
    expect(await holder.rebalance()).toBe(false);
    const before = holder.snapshot();
    expect(before.partitions).toHaveLength(PARTITIONS);
    expect(await standby.rebalance()).toBe(true);
    // The holder dies now: no more renewals. The standby retries every leaseMs / 3, as the relay does.
    await holder.renew();
    const diedAt = performance.now();
    let tookAt: number | undefined;
    while (performance.now() - diedAt < 3 * leaseMs) {
      await new Promise((r) => setTimeout(r, leaseMs / 3));
      if (!(await standby.rebalance())) {
        tookAt = performance.now();
        break;
      }
    }
    expect(tookAt).toBeDefined();
    const took = tookAt! - diedAt;
    expect(took).toBeGreaterThanOrEqual(leaseMs - 50);
    expect(took).toBeLessThanOrEqual(leaseMs + leaseMs / 3 + 250);
    expect(standby.size).toBe(PARTITIONS);
    const after = standby.snapshot();
    for (let i = 0; i < PARTITIONS; i++)
      expect(BigInt(after.epochs[i]!)).toBe(BigInt(before.epochs[i]!) + 1n);
    // The old holder, back, finds it holds nothing and cannot take any back.
    await holder.renew();
    expect(holder.size).toBe(0);
    expect(await holder.rebalance()).toBe(true);
    expect(await standby.verifyAll()).toBe(true);
  });

  it('a polling relay holding some partitions: the exclusive one gets none and logs why', async () => {
    await resetPartitions();
    // A second live relay makes the polling relay's fair share half the partitions.
    await db.pool.query(
      `INSERT INTO "${db.schema}".relays (relay_id, host, pid, lease_ms) VALUES ('ghost', 'h', 1, 600000)`,
    );
    const polling = leases('poll-1', 60_000, logRecorder().logger, false);
    await polling.rebalance();
    expect(polling.size).toBe(PARTITIONS / 2);
    const { lines, logger } = logRecorder();
    const cdc = leases('cdc-1', 60_000, logger, true);
    expect(await cdc.rebalance()).toBe(true);
    expect(cdc.size).toBe(0);
    expect(await cdc.rebalance()).toBe(true); // the same explanation is not repeated at once
    const warns = lines.filter((l) => l.level === 'error');
    expect(warns).toHaveLength(1);
    expect(warns[0]!.msg).toMatch(/CDC and polling relays must not share a schema/);
    expect(warns[0]!.obj['holders']).toEqual({ 'poll-1': PARTITIONS / 2 });
    expect([...(await owners()).entries()].sort()).toEqual(
      [
        ['poll-1', PARTITIONS / 2],
        [null, PARTITIONS / 2],
      ].sort(),
    );
  });

  it('an exclusive relay left with some partitions releases them and stands by', async () => {
    await resetPartitions();
    const { lines, logger } = logRecorder();
    const cdc = leases('cdc-2', 60_000, logger, true);
    expect(await cdc.rebalance()).toBe(false);
    // Four of its leases expire (a pause) and a polling relay takes them.
    await db.pool.query(
      `UPDATE "${db.schema}".partitions SET lease_until = now() - interval '1 second' WHERE partition < 4`,
    );
    await db.pool.query(
      `INSERT INTO "${db.schema}".relays (relay_id, host, pid, lease_ms) VALUES ('ghost', 'h', 1, 600000)`,
    );
    const polling = leases('poll-2', 60_000, logRecorder().logger, false);
    await polling.rebalance();
    expect(polling.size).toBe(4);
    await cdc.renew();
    expect(cdc.size).toBe(PARTITIONS - 4);
    expect(await cdc.verifyAll()).toBe(false);
    expect(await cdc.rebalance()).toBe(true);
    expect(cdc.size).toBe(0);
    expect(lines.some((l) => l.level === 'warn' && /released them/.test(l.msg))).toBe(true);
    const held = await owners();
    expect(held.get('poll-2')).toBe(4);
    expect(held.get('cdc-2')).toBeUndefined();
  });

  it('takeOverSlot, right after the leases are verified, terminates the stale holder of the slot', async () => {
    await resetPartitions();
    const names = await resolveCdcNames(db.pool, { schema: db.schema, slot: slot() });
    await ensureCdcSlot(db.pool, names);
    const stale = await holdSlot(db.pool, names.slot, names.publication);
    const cdc = leases('cdc-3', 60_000, logRecorder().logger, true);
    expect(await cdc.rebalance()).toBe(false);
    expect(await cdc.verifyAll()).toBe(true);
    const { lines, logger } = logRecorder();
    await takeOverSlot(db.pool, names.slot, { logger });
    expect(await stale.ended).toBeInstanceOf(Error);
    const { rows } = await db.pool.query('SELECT active FROM pg_replication_slots WHERE slot_name = $1', [
      names.slot,
    ]);
    expect(rows).toEqual([{ active: false }]);
    expect(lines.find((l) => l.level === 'warn')?.obj['pid']).toBe(stale.pid);
    await stale.close();
  });
});
