/**
 * W3 under pgbench, server side: a business INSERT plus a bare INSERT of the same payload, or
 * the producer's table-mode or WAL-mode statement, each with and without a caller version
 * (bench/workloads/pgbench-wal.ts). Prints each round's TPS and the medians with their ratio to
 * the bare INSERT.
 *
 *   npx tsx bench/pgbench-wal.ts [--seconds 10] [--rounds 3]
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { DATABASE_URL, summarize } from './lib.js';
import { pgbenchWalRuns } from './workloads/pgbench-wal.js';

const { values: args } = parseArgs({
  options: { seconds: { type: 'string', default: '10' }, rounds: { type: 'string', default: '3' } },
});
const pool = new pg.Pool({ connectionString: DATABASE_URL });
// SCHEMA: another schema than bench_pgbench_wal (two runs at once).
const schema = process.env['SCHEMA'];
try {
  const runs = await pgbenchWalRuns(pool, {
    seconds: Number(args.seconds),
    rounds: Number(args.rounds),
    ...(schema ? { schema } : {}),
  });
  const median = (xs: number[]) => summarize(xs).median;
  const bare = median(runs[0]!.tps);
  for (const f of runs)
    console.log(`${f.name}: median ${median(f.tps).toFixed(0)} tps, ${(median(f.tps) / bare).toFixed(2)}×`);
} finally {
  await pool.end();
}
