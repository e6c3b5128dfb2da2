/**
 * Where W2's tail comes from: one latency run (W2's latencyRun) against the diagnostic relay
 * bench/stall-trace-relay.mjs, which logs its slow publish calls with what the process did
 * meanwhile, and prints a summary (`publish-kinds`) when it stops.
 *
 *   npm run build && TXO_BENCH_RELAY_PROCESS=$PWD/bench/stall-trace-relay.mjs TXO_TRACE_ROOT=$PWD \
 *     RATE=1000 SECONDS=10 npx tsx bench/stall-trace.ts 2>&1 | grep -E 'RESULT|TRACE'
 *
 * TXO_TRACE_ROOT: the checkout whose dist/ the relay runs (another build: its checkout).
 */
import pg from 'pg';
import { DATABASE_URL } from './lib.js';
import { latencyRun } from './workloads/latency.js';

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 12 });
const rate = Number(process.env.RATE ?? 1000);
const r = await latencyRun(pool, { rate, seconds: Number(process.env.SECONDS ?? 10) });
console.log(
  `RESULT ${rate}: p50 ${r.p50.toFixed(1)} p95 ${r.p95.toFixed(1)} p99 ${r.p99.toFixed(1)} max ${r.max.toFixed(1)}`,
);
await pool.end();
