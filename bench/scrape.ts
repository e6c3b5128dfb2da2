/**
 * The O(partitions) backlog read at 1,000,000 pending events: `readBacklog`, a full prom-client
 * scrape of the backlog gauges, `outboxStatus` + its table, and the `tx-outbox status` process,
 * p50/p99 over `--runs` runs each; the old full count (`--exact`) once for contrast.
 *
 *   npm run build && npx tsx bench/scrape.ts [--events 1000000] [--runs 20] [--keep]
 */
import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { Registry } from 'prom-client';
import { formatStatus } from '../src/cli/status.js';
import { readBacklog } from '../src/ops/backlog.js';
import { registerBacklogGauges } from '../src/ops/backlog-gauges.js';
import { outboxStatus } from '../src/ops/status.js';
import { migrate } from '../src/schema/migrate.js';
import { DATABASE_URL, percentile } from './lib.js';

const { values: args } = parseArgs({
  options: {
    events: { type: 'string', default: '1000000' },
    runs: { type: 'string', default: '20' },
    keep: { type: 'boolean', default: false },
  },
});
const EVENTS = Number(args.events);
const RUNS = Number(args.runs);
const SCHEMA = 'bench_scrape';
const s = `"${SCHEMA}"`;

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });

async function load(): Promise<void> {
  await pool.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
  await migrate(pool, { schema: SCHEMA, partitions: 16 });
  const started = performance.now();
  // Rows as enqueue writes them: one event per aggregate, partition as the producer's hash would spread them.
  await pool.query(
    `INSERT INTO ${s}.events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload,
       created_at, next_attempt_at)
     SELECT gen_random_uuid(), ${s}.partition_of('order', 'o' || g), 'order', 'o' || g, 1, 'order.placed',
            jsonb_build_object('sku', 'ABC-123', 'n', g), now() - interval '10 minutes' + g * interval '500 microseconds', now()
     FROM generate_series(1, $1::int) AS g`,
    [EVENTS],
  );
  // A few dead events, a few retrying: the dead count goes through the partial index.
  await pool.query(`UPDATE ${s}.events SET status = 'dead', dead_at = now(), attempts = 10
    WHERE id IN (SELECT id FROM ${s}.events ORDER BY id DESC LIMIT 25)`);
  await pool.query(
    `UPDATE ${s}.events SET attempts = 1 WHERE id IN (SELECT id FROM ${s}.events ORDER BY id LIMIT 100)`,
  );
  await pool.query(`VACUUM (ANALYZE) ${s}.events`);
  console.log(`loaded ${EVENTS} events in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}

async function time(what: string, fn: () => Promise<unknown>): Promise<void> {
  await fn(); // warm-up: plan cache, connections
  const ms: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t = performance.now();
    await fn();
    ms.push(performance.now() - t);
  }
  ms.sort((a, b) => a - b);
  console.log(
    `| ${what} | ${percentile(ms, 50).toFixed(1)} | ${percentile(ms, 99).toFixed(1)} | ${ms.at(-1)!.toFixed(1)} |`,
  );
}

try {
  await load();
  const registry = new Registry();
  registerBacklogGauges(registry, pool, { schema: SCHEMA });
  const b = await readBacklog(pool, { schema: SCHEMA });
  console.log(
    `readBacklog: pending ${b.pending} (exact: ${b.exact}), dead ${b.dead}, oldest due ${b.oldestPendingAgeSeconds} s, sampled ${b.sampled}`,
  );
  console.log();
  console.log(`| ${RUNS} runs at ${EVENTS} pending | p50 ms | p99 ms | max ms |`);
  console.log('|---|---|---|---|');
  await time('readBacklog (one query)', () => readBacklog(pool, { schema: SCHEMA }));
  await time('prom-client scrape (registry.metrics())', () => registry.metrics());
  await time('outboxStatus + table (in process)', async () =>
    formatStatus(SCHEMA, await outboxStatus(pool, { schema: SCHEMA })),
  );
  await time('`tx-outbox status` (a new node process)', async () => {
    const r = spawnSync(process.execPath, ['dist/cli/main.js', 'status', '--schema', SCHEMA], {
      env: { ...process.env, DATABASE_URL },
      encoding: 'utf8',
    });
    if (r.status !== 0) throw new Error(r.stderr);
  });
  await time('`tx-outbox --version` (CLI start-up alone, for reference)', async () => {
    spawnSync(process.execPath, ['dist/cli/main.js', '--version']);
  });
  const t = performance.now();
  const exact = await outboxStatus(pool, { schema: SCHEMA, exact: true });
  console.log(
    `| outboxStatus --exact (the old full scan), once | ${(performance.now() - t).toFixed(1)} | | |  pending ${exact.pending}`,
  );
} finally {
  if (!args.keep) await pool.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
  await pool.end();
}
