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
 *
 * Prints one line per run, then per system and rate the medians [each run] of p50, p95, p99 and
 * max (ms), how late the producers' transactions started (p99, ms), the event loop delay p99 of
 * the producers' and the consumer's process, and tx-outbox's p50 and p99 ratios to each lean relay.
 */
import pg from 'pg';
import { DATABASE_URL, summarize } from './lib.js';
import { LEAN_RELAY, LEAN_RELAY_SAME_HEADERS, leanRelayLatencySystem } from './systems/lean-relay.js';
import {
  type LatencyPlacement,
  type LatencyResult,
  type LatencySystem,
  latencyRun,
  txOutboxLatencySystem,
} from './workloads/latency.js';

const rates = (process.env['RATES'] ?? '200,1000').split(',').map(Number);
const seconds = Number(process.env['SECONDS'] ?? 10);
const runs = Number(process.env['RUNS'] ?? 3);
const modes = (process.env['MODES'] ?? 'separate/steady').split(',').map((m) => {
  const [placement, pacing] = m.split('/');
  return {
    name: m,
    placement: (placement === 'harness' ? 'harness' : 'separate') as LatencyPlacement,
    pacing: (pacing === 'loose' ? 'loose' : 'steady') as 'loose' | 'steady',
  };
});
const TXO = 'tx-outbox (polling relay)';
const systems: Array<[string, () => LatencySystem]> = [
  [TXO, () => txOutboxLatencySystem()],
  [LEAN_RELAY, () => leanRelayLatencySystem()],
  [LEAN_RELAY_SAME_HEADERS, () => leanRelayLatencySystem({ headers: 'same' })],
];

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 12 });
const results = new Map<string, LatencyResult[]>();
const key = (placement: string, rate: number, name: string): string =>
  `${placement} | ${rate} tx/s | ${name}`;
try {
  for (let i = 0; i < runs; i++) {
    for (const rate of rates) {
      for (const mode of modes) {
        for (const [name, make] of systems) {
          const r = await latencyRun(pool, {
            rate,
            seconds,
            system: make(),
            placement: mode.placement,
            pacing: mode.pacing,
          });
          const k = key(mode.name, rate, name);
          results.set(k, [...(results.get(k) ?? []), r]);
          console.log(
            `${k}: p50 ${r.p50.toFixed(2)} p95 ${r.p95.toFixed(2)} p99 ${r.p99.toFixed(2)} max ${r.max.toFixed(1)} ms; ` +
              `${r.achievedRate.toFixed(0)} tx/s, ${r.received} received; starts late p99 ${r.lateness.p99.toFixed(2)} ` +
              `max ${r.lateness.max.toFixed(1)} ms; over 1 s: ${r.overSecond.events} events of ${r.overSecond.aggregates} ` +
              `aggregate(s); loop delay p99 producers ${r.loopDelayP99.producers.toFixed(1)}, ` +
              `consumer ${r.loopDelayP99.consumer.toFixed(1)} ms; CPU ${JSON.stringify(r.cpu)}`,
          );
        }
      }
    }
  }
} finally {
  await pool.end();
}

const median = (values: number[]): number => summarize(values).median;
const all = (rs: LatencyResult[], f: (r: LatencyResult) => number): string =>
  `${median(rs.map(f)).toFixed(2)} [${rs.map((r) => f(r).toFixed(1)).join(', ')}]`;
console.log(`\n${seconds} s a run, ${runs} interleaved rounds; medians [each run], ms:`);
for (const [k, rs] of results) {
  console.log(
    `${k}: p50 ${all(rs, (r) => r.p50)}, p95 ${all(rs, (r) => r.p95)}, p99 ${all(rs, (r) => r.p99)}, ` +
      `max ${all(rs, (r) => r.max)}; starts late p99 ${all(rs, (r) => r.lateness.p99)}; loop delay p99 ` +
      `producers ${all(rs, (r) => r.loopDelayP99.producers)}, consumer ${all(rs, (r) => r.loopDelayP99.consumer)}`,
  );
}
console.log('\nRatios of the medians, tx-outbox / lean relay:');
for (const { name: placement } of modes) {
  for (const rate of rates) {
    const ours = results.get(key(placement, rate, TXO));
    if (!ours) continue;
    for (const lean of [LEAN_RELAY, LEAN_RELAY_SAME_HEADERS]) {
      const theirs = results.get(key(placement, rate, lean));
      if (!theirs) continue;
      const ratio = (f: (r: LatencyResult) => number): string =>
        `${(median(ours.map(f)) / median(theirs.map(f))).toFixed(2)}×`;
      console.log(
        `${placement} | ${rate} tx/s | tx-outbox / ${lean}: p50 ${ratio((r) => r.p50)}, p99 ${ratio((r) => r.p99)}`,
      );
    }
  }
}
