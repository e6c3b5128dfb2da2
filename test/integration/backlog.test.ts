/**
 * The O(partitions) backlog read (src/ops/backlog.ts): exact below the sample, estimated above
 * it, due-only ages, a bounded walk whatever the head holds, and the scrape-time gauges.
 */
import { Registry } from 'prom-client';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { readBacklog } from '../../src/ops/backlog.js';
import { registerBacklogGauges } from '../../src/ops/backlog-gauges.js';
import { BACKLOG_PLANNER_SQL, READ_BACKLOG_SQL } from '../../src/ops/backlog-sql.js';
import { replayDead } from '../../src/ops/dead-letter.js';
import { skipDead } from '../../src/ops/dead-skip.js';
import { outboxStatus } from '../../src/ops/status.js';
import { enqueue } from '../../src/producer/enqueue.js';
import { permanent } from '../../src/publishers/core/outcomes.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import { migrate, migrationSql } from '../../src/schema/migrate.js';
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

/** The plan of the backlog read (sample size `sample`), under the planner settings it runs with. */
async function backlogPlan(sample: number): Promise<Record<string, unknown>> {
  const sql = READ_BACKLOG_SQL.replaceAll('{{schema}}', `"${db.schema}"`);
  return inTransaction(db.pool, async (client) => {
    await client.query(BACKLOG_PLANNER_SQL);
    const { rows } = await client.query<{ 'QUERY PLAN': [{ Plan: Record<string, unknown> }] }>(
      `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${sql}`,
      [sample],
    );
    return rows[0]!['QUERY PLAN'][0].Plan;
  });
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
    // 20,000 events delivered (deleted) before any statistics were taken, as an outbox does all
    // day: left to itself, the planner would read all 300 pending events in a bitmap scan and
    // sort them (at a million pending, a scan of the backlog).
    await db.pool.query(
      `INSERT INTO ${events} (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload)
       SELECT gen_random_uuid(), "${db.schema}".partition_of('gone', 'g' || g), 'gone', 'g' || g, 1, 'created', '{}'::jsonb
       FROM generate_series(1, 20000) AS g`,
    );
    await db.pool.query(`DELETE FROM ${events}`);
    await write(300);
    const nodes: { type: string; relation?: string; rows: number }[] = [];
    const walk = (node: Record<string, unknown>): void => {
      nodes.push({
        type: String(node['Node Type']),
        relation: node['Relation Name'] as string | undefined,
        rows: Number(node['Actual Rows']) * Number(node['Actual Loops'] ?? 1),
      });
      for (const child of (node['Plans'] as Record<string, unknown>[] | undefined) ?? []) walk(child);
    };
    walk(await backlogPlan(40));
    const onEvents = nodes.filter((n) => n.relation === 'events');
    expect(onEvents.length).toBeGreaterThan(0);
    expect(onEvents.some((n) => n.type === 'Seq Scan')).toBe(false);
    for (const n of onEvents) expect(n.rows).toBeLessThanOrEqual(40);
  });

  it('reads a bounded number of buffers with 100,000 dead events at the head: none of them is walked past or counted', async () => {
    // 100,000 dead events, then 20 pending ones. Written dead (as the CDC relay's hand-over writes
    // them): rows made dead by an UPDATE leave index entries that VACUUM removes only once no
    // snapshot older than the UPDATE remains, and the other test files' transactions may hold one.
    // The triggers' path through an UPDATE is the next test's.
    await db.pool.query(
      `INSERT INTO ${events} (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload, created_at,
                              status, dead_at, attempts)
       SELECT gen_random_uuid(), "${db.schema}".partition_of('dead', 'd' || g), 'dead', 'd' || g, 1, 'created', '{}'::jsonb,
              now() - interval '20 minutes', 'dead', now(), 10
       FROM generate_series(1, 100000) AS g`,
    );
    await write(20);
    await db.pool.query(
      `UPDATE ${events} SET created_at = now() - interval '10 minutes' WHERE status = 'pending'`,
    );
    await db.pool.query(`VACUUM ANALYZE ${events}`);
    try {
      const plan = (await backlogPlan(10_000)) as Record<string, number>;
      // The whole statement, its sample, counts and small tables included (planning apart).
      const buffers = plan['Shared Hit Blocks']! + plan['Shared Read Blocks']!;
      expect(buffers).toBeLessThan(100);
      const b = await readBacklog(db.pool, { schema: db.schema });
      expect(b).toMatchObject({ dead: 100_000, pending: 20, sampled: 20, exact: true });
      expect(b.oldestPendingAgeSeconds).toBeGreaterThan(590);
      expect(b.oldestPendingAgeSeconds).toBeLessThan(900);
    } finally {
      await db.pool.query(`TRUNCATE ${events}`);
    }
  });

  it('keeps the dead count exact through every way an event dies or stops being dead', async () => {
    const count = async () => {
      const exact = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${events} WHERE status = 'dead'`,
      );
      const b = await readBacklog(db.pool, { schema: db.schema });
      expect(b.dead).toBe(exact.rows[0]!.n);
      return b.dead;
    };
    await write(30, { prefix: 'kill' }); // new aggregates: the relay sees no gap before them
    const ids = async (n: number) =>
      (
        await db.pool.query<{ event_id: string }>(
          `SELECT event_id::text FROM ${events} WHERE status = 'dead' ORDER BY id LIMIT $1`,
          [n],
        )
      ).rows.map((r) => r.event_id);
    // The relay: a permanent failure kills every event at its aggregate's head (30 aggregates).
    const publisher = new RecordingPublisher();
    publisher.verdict = () => permanent('refused for the test');
    const relay = createRelay({ pool: db.pool, publisher, schema: db.schema, pollIntervalMs: 50 });
    await relay.start();
    try {
      // While the relay runs, the exact count and readBacklog are two reads: wait for both at 30.
      await waitFor(
        async () =>
          (
            await db.pool.query<{ n: number }>(
              `SELECT count(*)::int AS n FROM ${events} WHERE status = 'dead'`,
            )
          ).rows[0]!.n === 30 && (await readBacklog(db.pool, { schema: db.schema })).dead === 30,
        { what: 'the relay to kill the 30 events' },
      );
    } finally {
      await relay.stop({ timeout: 2000 });
    }
    await replayDead(db.pool, { schema: db.schema, eventIds: await ids(5), reason: 'test' });
    expect(await count()).toBe(25);
    await skipDead(db.pool, { schema: db.schema, eventIds: await ids(3), reason: 'test' });
    expect(await count()).toBe(22);
    await skipDead(db.pool, { schema: db.schema, eventIds: await ids(2), reason: 'test', publish: false });
    expect(await count()).toBe(20);
    // Everything dead at once, in one statement (a replay of all of them, undone).
    await db.pool.query(`UPDATE ${events} SET status = 'dead' WHERE status = 'pending'`);
    expect(await count()).toBe(28);
    await replayDead(db.pool, { schema: db.schema, eventIds: 'all', reason: 'test' });
    expect(await count()).toBe(0);
    // Inserted dead (as a CDC hand-over writes an event that failed for good), deleted, truncated.
    await db.pool.query(
      `INSERT INTO ${events} (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload, status, dead_at)
       SELECT gen_random_uuid(), "${db.schema}".partition_of('cdc', 'c' || g), 'cdc', 'c' || g, 1, 'created', '{}'::jsonb, 'dead', now()
       FROM generate_series(1, 6) AS g`,
    );
    expect(await count()).toBe(6);
    await db.pool.query(
      `DELETE FROM ${events} WHERE aggregate_type = 'cdc' AND aggregate_id IN ('c1', 'c2')`,
    );
    expect(await count()).toBe(4);
    await db.pool.query(`TRUNCATE ${events}`);
    expect(await count()).toBe(0);
  });

  it('counts the dead events already there when migration 14 is applied', async () => {
    const schema = `${db.schema}_up`;
    const s = `"${schema}"`;
    try {
      await db.pool.query(`CREATE SCHEMA ${s}`);
      await db.pool.query(
        `CREATE TABLE ${s}.migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
      );
      for (const m of migrationSql({ schema, partitions: 4 }).filter((m) => m.version < 14)) {
        await db.pool.query(m.sql);
        await db.pool.query(`INSERT INTO ${s}.migrations (version, name) VALUES ($1, $2)`, [
          m.version,
          m.name,
        ]);
      }
      await db.pool.query(
        `INSERT INTO ${s}.events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload, status)
         SELECT gen_random_uuid(), ${s}.partition_of('order', 'o' || g), 'order', 'o' || g, 1, 'created', '{}'::jsonb,
                CASE WHEN g <= 7 THEN 'dead' ELSE 'pending' END
         FROM generate_series(1, 10) AS g`,
      );
      expect((await migrate(db.pool, { schema })).applied).toContain(14);
      expect((await readBacklog(db.pool, { schema })).dead).toBe(7);
      await db.pool.query(`UPDATE ${s}.events SET status = 'dead' WHERE status = 'pending'`);
      expect((await readBacklog(db.pool, { schema })).dead).toBe(10);
    } finally {
      await db.pool.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
    }
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
  it('sets every backlog gauge from one read per scrape, one registration per registry and schema', async () => {
    await write(8);
    await db.pool.query(`UPDATE ${events} SET status = 'dead', dead_at = now() WHERE id =
      (SELECT min(id) FROM ${events})`);
    const registry = new Registry();
    // A read is one statement on the pool or one checkout of a client (the read's transaction).
    let queries = 0;
    const counting = new Proxy(db.pool, {
      get(target, key, receiver) {
        if (key === 'query' || key === 'connect') {
          const method = target[key] as (...a: unknown[]) => unknown;
          return (...args: unknown[]) => {
            queries += 1;
            return method.apply(target, args);
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
