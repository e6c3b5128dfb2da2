/**
 * W2's tail and idle CPU in pairs: this build's polling relay against the lean relay (and
 * optionally another build's relay), interleaved run by run so each system sees the same machine.
 * For before/after figures of the relay's latency tail without the whole harness.
 *
 *   npx tsx bench/tail.ts                                   # 200 and 1,000 tx/s, 10 s, 3 rounds
 *   TXO_BASE=/path/to/checkout/bench/relay-process.mjs npx tsx bench/tail.ts
 *   RATES=1000 SECONDS=20 RUNS=5 IDLE=0 npx tsx bench/tail.ts
 *   RATES= IDLE=10 IDLE_SETTLE=15 npx tsx bench/tail.ts     # idle CPU only, past V8's post-start GCs
 *
 * Prints one line per run and, per system and rate, the medians of p50 and p99 (ms) and their
 * ratios to the lean relay's; then idle CPU (IDLE seconds per run, 0: skipped) as % of one core.
 */
import pg from 'pg';
import { DATABASE_URL, summarize } from './lib.js';
import { leanRelayLatencySystem } from './systems/lean-relay.js';
import { type IdleCpu, type IdleRelay, idleCpuRun } from './workloads/idle-cpu.js';
import { type LatencySystem, latencyRun, txOutboxLatencySystem } from './workloads/latency.js';

const rates = (process.env['RATES'] ?? '200,1000').split(',').filter(Boolean).map(Number);
const seconds = Number(process.env['SECONDS'] ?? 10);
const runs = Number(process.env['RUNS'] ?? 3);
const idleSeconds = Number(process.env['IDLE'] ?? 10);
/** Seconds an idle relay settles before its CPU is read (idle-cpu.ts's default: 2). */
const idleSettle = Number(process.env['IDLE_SETTLE'] ?? 2);
const base = process.env['TXO_BASE'];

interface Contender {
  readonly name: string;
  readonly system: () => LatencySystem;
  readonly idle: IdleRelay;
  /** The relay process script to run (another build's), if not this build's. */
  readonly script?: string;
}

const contenders: Contender[] = [
  ...(base
    ? [
        {
          name: 'tx-outbox (base)',
          system: () => txOutboxLatencySystem(),
          idle: 'tx-outbox' as const,
          script: base,
        },
      ]
    : []),
  { name: 'tx-outbox (this build)', system: () => txOutboxLatencySystem(), idle: 'tx-outbox' },
  { name: 'lean relay', system: () => leanRelayLatencySystem(), idle: 'lean' },
];

function use(c: Contender): void {
  if (c.script) process.env['TXO_BENCH_RELAY_PROCESS'] = c.script;
  else delete process.env['TXO_BENCH_RELAY_PROCESS'];
}

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 12 });
const latency = new Map<string, { p50: number[]; p99: number[] }>();
const idle = new Map<string, IdleCpu[]>();
try {
  for (let i = 0; i < runs; i++) {
    for (const rate of rates) {
      for (const c of contenders) {
        use(c);
        const r = await latencyRun(pool, { rate, seconds, system: c.system() });
        const key = `${c.name} @ ${rate}`;
        const f = latency.get(key) ?? { p50: [], p99: [] };
        latency.set(key, f);
        f.p50.push(r.p50);
        f.p99.push(r.p99);
        console.log(
          `${key}: achieved ${r.achievedRate.toFixed(0)} tx/s, p50 ${r.p50.toFixed(1)} p95 ${r.p95.toFixed(1)} ` +
            `p99 ${r.p99.toFixed(1)} max ${r.max.toFixed(1)} ms, CPU ${JSON.stringify(r.cpu)}`,
        );
      }
    }
    if (idleSeconds > 0) {
      for (const c of contenders) {
        use(c);
        const r = await idleCpuRun(pool, { relay: c.idle, seconds: idleSeconds, settleSeconds: idleSettle });
        idle.set(c.name, [...(idle.get(c.name) ?? []), r]);
        console.log(
          `${c.name} idle: relay ${r.relay?.toFixed(2)} % + PostgreSQL ${r.postgres?.toFixed(2)} % of a core`,
        );
      }
    }
  }
} finally {
  delete process.env['TXO_BENCH_RELAY_PROCESS'];
  await pool.end();
}
const median = (values: number[]): number => summarize(values).median;
console.log(`\n${runs} interleaved rounds, ${seconds} s per latency run; medians (ms):`);
for (const rate of rates) {
  const lean = latency.get(`lean relay @ ${rate}`);
  for (const c of contenders) {
    const f = latency.get(`${c.name} @ ${rate}`);
    if (!f || !lean) continue;
    const p50 = median(f.p50);
    const p99 = median(f.p99);
    console.log(
      `${rate} tx/s ${c.name}: p50 ${p50.toFixed(1)} [${f.p50.map((v) => v.toFixed(1)).join(', ')}] ` +
        `(${(p50 / median(lean.p50)).toFixed(2)}× lean), p99 ${p99.toFixed(1)} [${f.p99.map((v) => v.toFixed(1)).join(', ')}] ` +
        `(${(p99 / median(lean.p99)).toFixed(2)}× lean)`,
    );
  }
}
for (const [name, rs] of idle) {
  const together = rs.map((r) => (r.relay ?? Number.NaN) + (r.postgres ?? Number.NaN));
  console.log(
    `idle ${name}: relay + PostgreSQL ${median(together).toFixed(2)} % of a core [${together.map((v) => v.toFixed(2)).join(', ')}]`,
  );
}
