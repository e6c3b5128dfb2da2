/**
 * W1 in pairs: this build's relay against the lean relay (bench/lean-relay-process.ts) and the
 * lean relay sending tx-outbox's headers, and optionally another build's relay, run interleaved
 * on the same backlog shape so each system sees the same machine. For before/after figures of one
 * change without the whole harness.
 *
 *   npx tsx bench/pair.ts                                  # 100,000 events, 5,000 aggregates, 3 runs
 *   TXO_BASE=/path/to/checkout/bench/relay-process.mjs npx tsx bench/pair.ts
 *   EVENTS=10000 AGGREGATES=1000 RUNS=5 npx tsx bench/pair.ts
 *   SOURCE=cdc VIA=wal npx tsx bench/pair.ts               # the CDC relay (VIA=table: table mode)
 *   SOURCE=cdc BACKLOG=at-start npx tsx bench/pair.ts      # the backlog written before the relay starts
 *
 * The other build must be built (`npm run build` in its checkout). Prints one line per run, then
 * per system the median events/s [each run], CPU ms per 1,000 events of the relay process, its
 * PostgreSQL backends and nats-server (bench/cpu.ts), the relay's peak RSS; then each tx-outbox's
 * ratios to the lean relay and to the lean relay with the same headers (drain, relay CPU,
 * PostgreSQL CPU): the first says what the guarantees and the wire format cost together, the
 * second what the guarantees cost.
 */
import pg from 'pg';
import { DATABASE_URL, summarize } from './lib.js';
import { LEAN_RELAY, LEAN_RELAY_SAME_HEADERS, leanRelaySystem } from './systems/lean-relay.js';
import { txOutboxSystem } from './systems/tx-outbox.js';
import type { DrainSystem } from './systems/types.js';
import { drainRun } from './workloads/drain.js';

const events = Number(process.env['EVENTS'] ?? 100_000);
const aggregates = Number(process.env['AGGREGATES'] ?? 5_000);
const runs = Number(process.env['RUNS'] ?? 3);
const base = process.env['TXO_BASE'];
const source = process.env['SOURCE'] === 'cdc' ? 'cdc' : 'poll';
const via = process.env['VIA'] === 'wal' ? 'wal' : 'table';
const backlog = process.env['BACKLOG'] === 'at-start' ? 'at-start' : 'while-streaming';
/** tx-outbox as configured by SOURCE, VIA and BACKLOG (default: the CDC relay streams while the backlog is written). */
const txo = () => (source === 'cdc' ? txOutboxSystem({ source, via, backlog }) : txOutboxSystem());

interface Contender {
  readonly name: string;
  readonly system: () => DrainSystem;
  /** The relay process script to run (tx-outbox's, of another build), if not this build's. */
  readonly script?: string;
  /** A tx-outbox build: its ratios to the lean relays are printed. */
  readonly txOutbox?: boolean;
}

const contenders: Contender[] = [
  ...(base ? [{ name: `tx-outbox (${base})`, system: txo, script: base, txOutbox: true }] : []),
  { name: 'tx-outbox (this build)', system: txo, txOutbox: true },
  { name: LEAN_RELAY, system: () => leanRelaySystem() },
  { name: LEAN_RELAY_SAME_HEADERS, system: () => leanRelaySystem({ headers: 'same' }) },
];

interface Figures {
  readonly rate: number[];
  readonly relay: number[];
  readonly postgres: number[];
  readonly nats: number[];
  readonly rss: number[];
}

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 12 });
const figures = new Map<string, Figures>();
try {
  for (let i = 0; i < runs; i++) {
    for (const c of contenders) {
      if (c.script) process.env['TXO_BENCH_RELAY_PROCESS'] = c.script;
      else delete process.env['TXO_BENCH_RELAY_PROCESS'];
      const r = await drainRun(pool, c.system(), { events, aggregates, payloadBytes: 300, relays: 1 });
      let f = figures.get(c.name);
      if (!f) {
        f = { rate: [], relay: [], postgres: [], nats: [], rss: [] };
        figures.set(c.name, f);
      }
      f.rate.push(r.perSecond);
      if (r.cpu?.relay !== undefined) f.relay.push(r.cpu.relay);
      if (r.cpu?.postgres !== undefined) f.postgres.push(r.cpu.postgres);
      if (r.cpu?.nats !== undefined) f.nats.push(r.cpu.nats);
      if (r.peakRssMb !== undefined) f.rss.push(r.peakRssMb);
      console.log(
        `${c.name}: ${Math.round(r.perSecond)} events/s, CPU ${JSON.stringify(r.cpu)}, RSS ${r.peakRssMb} MB`,
      );
    }
  }
} finally {
  delete process.env['TXO_BENCH_RELAY_PROCESS'];
  await pool.end();
}
const median = (values: number[]): number | undefined =>
  values.length === 0 ? undefined : summarize(values).median;
const fmt = (n: number | undefined, digits = 1): string => (n === undefined ? 'n/a' : n.toFixed(digits));
console.log(
  `\n${events} events over ${aggregates} aggregates, ${runs} interleaved runs; medians [each run]:`,
);
for (const [name, f] of figures) {
  console.log(
    `${name}: ${fmt(median(f.rate), 0)} events/s [${f.rate.map(Math.round).join(', ')}]; CPU ms per 1,000 events: ` +
      `relay ${fmt(median(f.relay))} [${f.relay.map((v) => v.toFixed(1)).join(', ')}], ` +
      `PostgreSQL ${fmt(median(f.postgres))} [${f.postgres.map((v) => v.toFixed(1)).join(', ')}], ` +
      `NATS ${fmt(median(f.nats))}; peak RSS ${fmt(median(f.rss), 0)} MB [${f.rss.join(', ')}]`,
  );
}
/** a / b of the medians of one measure. */
const ratio = (a: Figures, b: Figures, measure: keyof Figures): string => {
  const x = median(a[measure]);
  const y = median(b[measure]);
  return x === undefined || y === undefined || y === 0 ? 'n/a' : `${(x / y).toFixed(2)}×`;
};
console.log('\nRatios of the medians (drain: higher is better; CPU: lower is better):');
for (const c of contenders.filter((c) => c.txOutbox)) {
  const ours = figures.get(c.name);
  if (!ours) continue;
  for (const lean of [LEAN_RELAY, LEAN_RELAY_SAME_HEADERS]) {
    const theirs = figures.get(lean);
    if (!theirs) continue;
    console.log(
      `${c.name} / ${lean}: drain ${ratio(ours, theirs, 'rate')}, relay CPU ${ratio(ours, theirs, 'relay')}, ` +
        `PostgreSQL CPU ${ratio(ours, theirs, 'postgres')}, NATS CPU ${ratio(ours, theirs, 'nats')}`,
    );
  }
}
