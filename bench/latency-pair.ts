/**
 * W2 in pairs: tx-outbox's polling relay against the lean relay and the lean relay with
 * tx-outbox's headers, run interleaved (system by system within each round) at each rate, so
 * every system sees the same machine. For W2's ratios without the whole harness.
 *
 *   npx tsx bench/latency-pair.ts                       # 200 and 1,000 tx/s, 10 s a run, 3 rounds
 *   RATES=1000 SECONDS=20 RUNS=5 npx tsx bench/latency-pair.ts
 *   MODES=separate/steady,harness/loose npx tsx bench/latency-pair.ts
 *       # placement/pacing (bench/workloads/latency.ts); harness/loose is W2 as it ran before
 *       # issue 26: producers and consumer in the harness process, one schedule per connection
 *   CDC=wal,table npx tsx bench/latency-pair.ts         # the CDC relay too (WAL-mode producers, table mode)
 *
 * Prints one line per run, then per system and rate the medians [each run] of p50, p95, p99 and
 * max (ms), how late the producers' transactions started (p99, ms), the event loop delay p99 of
 * the producers' and the consumer's process, and each tx-outbox relay's p50 and p99 ratios to
 * each lean relay (bench/workloads/latency-pair.ts).
 */
import pg from 'pg';
import { DATABASE_URL } from './lib.js';
import { LEAN_RELAY, LEAN_RELAY_SAME_HEADERS, leanRelayLatencySystem } from './systems/lean-relay.js';
import { txOutboxLatencySystem } from './workloads/latency.js';
import {
  type LatencyContender,
  latencyPairReport,
  latencyPairs,
  parseModes,
} from './workloads/latency-pair.js';

const rates = (process.env['RATES'] ?? '200,1000').split(',').map(Number);
const seconds = Number(process.env['SECONDS'] ?? 10);
const runs = Number(process.env['RUNS'] ?? 3);
const modes = parseModes(process.env['MODES'] ?? 'separate/steady');
const cdc = (process.env['CDC'] ?? '').split(',').filter((v) => v === 'wal' || v === 'table');
const contenders: LatencyContender[] = [
  { name: 'tx-outbox (polling relay)', system: () => txOutboxLatencySystem(), txOutbox: true },
  ...cdc.map((via) => ({
    name: txOutboxLatencySystem({ source: 'cdc', via }).name,
    system: () => txOutboxLatencySystem({ source: 'cdc', via }),
    txOutbox: true,
  })),
  { name: LEAN_RELAY, system: () => leanRelayLatencySystem() },
  { name: LEAN_RELAY_SAME_HEADERS, system: () => leanRelayLatencySystem({ headers: 'same' }) },
];

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 12 });
const options = { rates, seconds, runs, modes, contenders };
try {
  const results = await latencyPairs(pool, options);
  console.log(`\n${latencyPairReport(results, options).join('\n')}`);
} finally {
  await pool.end();
}
