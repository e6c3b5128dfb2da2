/**
 * The O(partitions) backlog read (src/ops/backlog.ts): exact below the sample, estimated above
 * it, due-only ages, a bounded walk whatever the head holds, and the scrape-time gauges.
 */
import type pg from 'pg';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { readBacklog } from '../../src/ops/backlog.js';
import { registerBacklogGauges } from '../../src/ops/backlog-gauges.js';
import { READ_BACKLOG_SQL } from '../../src/ops/backlog-sql.js';
import { outboxStatus } from '../../src/ops/status.js';
import { enqueue } from '../../src/producer/enqueue.js';
import { createRelay } from '../../src/relay/relay.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

let db: TestDb;
let events: string;
beforeAll(async () => {
  db = await createTestDb('backlog', { partitions: 4 });
  events = `"${db.schema}".events`;
});
afterAll(async () => {
  await db?.close();
});
beforeEach(async () => {
  await db.pool.query(`DELETE FROM ${events}`);
});

async function write(count: number, extra: { deliverAfter?: Date; prefix?: string } = {}): Promise<void> {
  await inTransaction(db.pool, (tx) =>
    enqueue(
      tx,
      Array.from({ length: count }, (_, i) => ({
        aggregateType: 'order',
        aggregateId: `${extra.prefix ?? 'o'}${i}`,
        type: 'created',
        payload: { i },
        ...(extra.deliverAfter ? { deliverAfter: extra.deliverAfter } : {}),
      })),
      { schema: db.schema },
    ),
  );
}

/** The statistics system sees the rows written so far (it lags commits by about a second). */
async function statsCaughtUp(): Promise<void> {
  const { rows } = await db.pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${events}`);
  const n = Number(rows[0]!.n);
  await waitFor(
    async () => {
      const live = await db.pool.query<{ live: string }>(
        `SELECT pg_stat_get_live_tuples('${events}'::regclass)::text AS live`,
      );
      return Number(live.rows[0]!.live) === n;
    },
    { what: `the live-row statistics to reach ${n}` },
  );
}

describe('readBacklog', () => {
  it('is exact below the sample: counts, due-only ages, dead, unowned partitions', async () => {
    await write(12);
    await write(3, { deliverAfter: new Date(Date.now() + 3_600_000), prefix: 'later' });
    // Make the oldest events old, then: one dead, one backing off after a failure (still lag: it
    // should have been delivered by now, whatever its retry time).
    await db.pool.query(`UPDATE ${events} SET created_at = now() - interval '1 hour' WHERE id IN
      (SELECT id FROM ${events} ORDER BY id LIMIT 3)`);
    await db.pool.query(`UPDATE ${events} SET status = 'dead', dead_at = now() WHERE id =
      (SELECT min(id) FROM ${events})`);
    await db.pool.query(`UPDATE ${events} SET attempts = 1, next_attempt_at = now() + interval '1 hour',
      created_at = now() - interval '90 minutes' WHERE id = (SELECT min(id) + 1 FROM ${events})`);
    // A future deliverAfter, hours old: not lag either.
    await db.pool.query(`UPDATE ${events} SET created_at = now() - interval '2 hours'
      WHERE aggregate_id LIKE 'later%'`);

    const b = await readBacklog(db.pool, { schema: db.schema });
    expect(b.exact).toBe(true);
    expect(b.sampled).toBe(14); // the dead one is counted apart, not sampled
    expect(b.pending).toBe(14);
    expect(b.dead).toBe(1);
    expect(b.retrying).toBe(1);
    // The backing-off event is the oldest lag: about 5400 s; the deliverAfter ones (7200 s old) are not lag.
    expect(b.oldestPendingAgeSeconds).toBeGreaterThan(5300);
    expect(b.oldestPendingAgeSeconds).toBeLessThan(5500);
    expect(b.partitionsUnowned).toBe(4);
    expect(b.relaysLive).toBe(0);

    const scan = await readBacklog(db.pool, { schema: db.schema, exact: true });
    expect(scan.partitions.map((p) => p.pending)).toEqual(b.partitions.map((p) => p.pending));
    expect(scan.partitions.map((p) => p.oldestPendingAgeSeconds === null)).toEqual(
      b.partitions.map((p) => p.oldestPendingAgeSeconds === null),
    );
    expect(b.partitions.reduce((sum, p) => sum + p.pending, 0)).toBe(14);
  });

  it('estimates beyond the sample: live rows minus dead, the sample scaled to partitions', async () => {
    await write(200);
    await db.pool.query(`UPDATE ${events} SET status = 'dead', dead_at = now() WHERE id IN
      (SELECT id FROM ${events} ORDER BY id DESC LIMIT 10)`);
    await statsCaughtUp();

    const b = await readBacklog(db.pool, { schema: db.schema, sampleSize: 50 });
    expect(b.exact).toBe(false);
    expect(b.sampled).toBe(50);
    expect(b.dead).toBe(10);
    expect(b.pending).toBe(190);
    // Scaled shares: they add up to the total (up to rounding) and follow the exact counts roughly.
    const sum = b.partitions.reduce((s, p) => s + p.pending, 0);
    expect(Math.abs(sum - 190)).toBeLessThanOrEqual(4);
    expect(b.oldestPendingAgeSeconds).not.toBeNull();

    const status = await outboxStatus(db.pool, { schema: db.schema, exact: true });
    expect(status.exact).toBe(true);
    expect(status.pending).toBe(190);
  });

  it('a long head of dead events does not hide the due events behind it', async () => {
    await write(120);
    await db.pool.query(`UPDATE ${events} SET status = 'dead', dead_at = now() WHERE id IN
      (SELECT id FROM ${events} ORDER BY id LIMIT 100)`);
    await db.pool.query(
      `UPDATE ${events} SET created_at = now() - interval '10 minutes' WHERE status = 'pending'`,
    );
    await statsCaughtUp();
    const b = await readBacklog(db.pool, { schema: db.schema, sampleSize: 50 });
    expect(b.dead).toBe(100);
    expect(b.pending).toBe(20);
    // The sample is of undelivered events that are not dead: all 20 pending ones, exactly.
    expect(b.exact).toBe(true);
    expect(b.oldestPendingAgeSeconds).toBeGreaterThan(590);
    expect(b.partitions.reduce((sum, p) => sum + p.pending, 0)).toBe(20);
  });

  it('an event whose deliverAfter has passed is lag from that time, not from its creation', async () => {
    await write(1, { deliverAfter: new Date(Date.now() + 60_000), prefix: 'due' });
    await db.pool.query(`UPDATE ${events} SET created_at = now() - interval '2 hours',
      deliver_after = now() - interval '30 seconds', next_attempt_at = now() - interval '30 seconds'`);
    const b = await readBacklog(db.pool, { schema: db.schema });
    expect(b.oldestPendingAgeSeconds).toBeGreaterThan(25);
    expect(b.oldestPendingAgeSeconds).toBeLessThan(60);
  });

  it('reads at most the sample from the events heap: no sequential scan, no full count', async () => {
    await write(300);
    const sql = READ_BACKLOG_SQL.replaceAll('{{schema}}', `"${db.schema}"`);
    const { rows } = await db.pool.query<{ 'QUERY PLAN': unknown }>(
      `EXPLAIN (ANALYZE, FORMAT JSON) ${sql}`,
      [40],
    );
    const nodes: { type: string; relation?: string; rows: number }[] = [];
    const walk = (node: Record<string, unknown>): void => {
      nodes.push({
        type: String(node['Node Type']),
        relation: node['Relation Name'] as string | undefined,
        rows: Number(node['Actual Rows']) * Number(node['Actual Loops'] ?? 1),
      });
      for (const child of (node['Plans'] as Record<string, unknown>[] | undefined) ?? []) walk(child);
    };
    walk((rows[0]!['QUERY PLAN'] as { Plan: Record<string, unknown> }[])[0]!.Plan);
    const onEvents = nodes.filter((n) => n.relation === 'events');
    expect(onEvents.length).toBeGreaterThan(0);
    expect(onEvents.some((n) => n.type === 'Seq Scan')).toBe(false);
    for (const n of onEvents) expect(n.rows).toBeLessThanOrEqual(40);
  });

  it('sees live relays and owned partitions', async () => {
    await db.pool.query(
      `INSERT INTO "${db.schema}".relays (relay_id, host, pid, lease_ms) VALUES ('r-live', 'h', 1, 60000),
       ('r-gone', 'h', 2, 1000)`,
    );
    await db.pool.query(`UPDATE "${db.schema}".relays SET heartbeat_at = now() - interval '1 minute'
      WHERE relay_id = 'r-gone'`);
    await db.pool.query(`UPDATE "${db.schema}".partitions SET owner = 'r-live', epoch = 1,
      lease_until = now() + interval '1 minute' WHERE partition IN (0, 1)`);
    await db.pool.query(`UPDATE "${db.schema}".partitions SET owner = 'r-gone', epoch = 1,
      lease_until = now() - interval '1 second' WHERE partition = 2`);
    try {
      const b = await readBacklog(db.pool, { schema: db.schema });
      expect(b.relaysLive).toBe(1);
      expect(b.relays.map((r) => [r.relayId, r.live])).toEqual([
        ['r-gone', false],
        ['r-live', true],
      ]);
      expect(b.partitionsUnowned).toBe(2);
    } finally {
      await db.pool.query(`DELETE FROM "${db.schema}".relays`);
      await db.pool.query(`UPDATE "${db.schema}".partitions SET owner = NULL, lease_until = '-infinity'`);
    }
  });
});

describe('backlog gauges', () => {
  it('sets every backlog gauge from one query per scrape, one registration per registry and schema', async () => {
    await write(8);
    await db.pool.query(`UPDATE ${events} SET status = 'dead', dead_at = now() WHERE id =
      (SELECT min(id) FROM ${events})`);
    const registry = new Registry();
    let queries = 0;
    const counting = new Proxy(db.pool, {
      get(target, key, receiver) {
        if (key === 'query') {
          return (...args: Parameters<pg.Pool['query']>) => {
            queries += 1;
            return (target.query as (...a: unknown[]) => unknown).apply(target, args);
          };
        }
        return Reflect.get(target, key, receiver);
      },
    });
    const off1 = registerBacklogGauges(registry, counting, { schema: db.schema });
    const off2 = registerBacklogGauges(registry, counting, { schema: db.schema });
    const text = await registry.metrics();
    expect(queries).toBe(1);
    const value = (line: string) => {
      const found = text.split('\n').find((l) => l.startsWith(line));
      return found === undefined ? undefined : Number(found.slice(line.length).trim());
    };
    const s = `schema="${db.schema}"`;
    expect(value(`tx_outbox_pending_events{${s}}`)).toBe(7);
    expect(value(`tx_outbox_dead_events{${s}}`)).toBe(1);
    expect(value(`tx_outbox_partitions_unowned{${s}}`)).toBe(4);
    expect(value(`tx_outbox_relays_live{${s}}`)).toBe(0);
    expect(value(`tx_outbox_oldest_pending_age_seconds{${s}}`)).toBeGreaterThanOrEqual(0);
    const perPartition = [0, 1, 2, 3].map(
      (p) => value(`tx_outbox_partition_pending_events{${s},partition="${p}"}`) ?? NaN,
    );
    expect(perPartition.reduce((a, b) => a + b, 0)).toBe(7);
    expect(text).toMatch(/tx_outbox_partition_oldest_pending_age_seconds\{[^}]*partition="3"\}/);
    off1();
    await registry.metrics();
    expect(queries).toBe(2);
    off2();
    await registry.metrics();
    expect(queries).toBe(2);
  });

  it('a relay given metrics registers them for its schema, labelled by schema only', async () => {
    await write(5, { deliverAfter: new Date(Date.now() + 3_600_000) });
    const registry = new Registry();
    const relay = createRelay({
      pool: db.pool,
      publisher: new RecordingPublisher(),
      schema: db.schema,
      pollIntervalMs: 50,
      metrics: registry,
    });
    await relay.start();
    try {
      await waitFor(
        async () => (await registry.metrics()).includes(`tx_outbox_relays_live{schema="${db.schema}"} 1`),
        {
          what: 'the relay live in the gauge',
        },
      );
      const text = await registry.metrics();
      expect(text).toContain(`tx_outbox_pending_events{schema="${db.schema}"} 5`);
      // Nothing due: a future deliverAfter is not lag.
      expect(text).toContain(`tx_outbox_oldest_pending_age_seconds{schema="${db.schema}"} 0`);
      expect(text).not.toMatch(/tx_outbox_pending_events\{[^}]*publisher=/);
    } finally {
      await relay.stop({ timeout: 2000 });
    }
  });
});
