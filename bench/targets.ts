/**
 * Issue 26's targets table from one run: W1 (the polling relay, the CDC relay in both producer
 * modes, the lean relay and the lean relay with tx-outbox's headers, interleaved run by run:
 * bench/workloads/drain-pair.ts), W2 (the same relays at each rate, interleaved:
 * bench/workloads/latency-pair.ts), W3 (the producer: W3's client-side rounds,
 * bench/workloads/producer.ts, and server side under pgbench, bench/workloads/pgbench-wal.ts) and
 * W6 (a snapshot held while producers offer a steady rate, then W1's drain held vs not:
 * bench/workloads/held-snapshot.ts). Each row as measured, its target, met or not; then the raw
 * figures of every run, the command and the machine. Written to bench/results/targets-<time>.md
 * and stdout.
 *
 *   npx tsx bench/targets.ts                       # full sizes, about 35 minutes (33 measured; W6: 2 × 600 s)
 *   npx tsx bench/targets.ts --quick               # about 6 minutes: 10,000 events, 5 s W2 runs, W6 20 s
 *   npx tsx bench/targets.ts --only W1,W2          # some parts (W1, W2, W3, W6)
 *   EVENTS=2000 AGGREGATES=200 RUNS=1 SECONDS=2 W3_SECONDS=1 W3_ROUNDS=1 W6_SECONDS=10 W6_PAIRS=1 \
 *     npx tsx bench/targets.ts                     # a check that it runs (figures meaningless)
 *
 * Sizes from the environment, over the profile: EVENTS, AGGREGATES (W1 and W6's drain), RUNS (W1
 * runs and W2 rounds), RATES, CDC_RATES, SECONDS (W2), W3_SECONDS, W3_ROUNDS, W6_RATE, W6_SECONDS,
 * W6_PAIRS (W6's drain pairs, not held and held). The relay processes run the built package:
 * `npm run build` first.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { DATABASE_URL, fmtMs, machine } from './lib.js';
import {
  LEAN_RELAY,
  LEAN_RELAY_SAME_HEADERS,
  leanRelayLatencySystem,
  leanRelaySystem,
} from './systems/lean-relay.js';
import { txOutboxSystem } from './systems/tx-outbox.js';
import {
  CDC_TABLE,
  CDC_WAL,
  markdownTable,
  POLLING,
  type TargetRow,
  w1Rows,
  w2Rows,
  w3Rows,
  w6Rows,
} from './targets-table.js';
import {
  type DrainContender,
  type DrainFigures,
  drainPairReport,
  drainPairs,
} from './workloads/drain-pair.js';
import {
  type HeldDrainRun,
  type HeldSteadyRun,
  heldDrainRun,
  heldSteadyRun,
} from './workloads/held-snapshot.js';
import { type LatencyResult, txOutboxLatencySystem } from './workloads/latency.js';
import {
  type LatencyContender,
  latencyPairReport,
  latencyPairs,
  parseModes,
} from './workloads/latency-pair.js';
import { type PgbenchRuns, pgbenchWalRuns } from './workloads/pgbench-wal.js';
import { type ProducerRuns, producerRuns } from './workloads/producer.js';

const { values: args } = parseArgs({
  options: { quick: { type: 'boolean', default: false }, only: { type: 'string' } },
});
const PROFILES = {
  full: { EVENTS: 100_000, AGGREGATES: 5_000, RUNS: 3, SECONDS: 10, W3_SECONDS: 10, W3_ROUNDS: 3 },
  quick: { EVENTS: 10_000, AGGREGATES: 1_000, RUNS: 3, SECONDS: 5, W3_SECONDS: 3, W3_ROUNDS: 3 },
};
const W6 = {
  full: { W6_RATE: 1000, W6_SECONDS: 600, W6_PAIRS: 3 },
  quick: { W6_RATE: 1000, W6_SECONDS: 20, W6_PAIRS: 1 },
};
const profileName = args.quick ? 'quick' : 'full';
const defaults: Record<string, number> = { ...PROFILES[profileName], ...W6[profileName] };
/** The environment's value of a size, else the profile's. */
const size = (name: string): number => Number(process.env[name] ?? defaults[name]);
const list = (name: string, fallback: string): number[] =>
  (process.env[name] ?? fallback).split(',').filter(Boolean).map(Number);
const [events, aggregates, runs] = [size('EVENTS'), size('AGGREGATES'), size('RUNS')];
const rates = list('RATES', '200,1000');
const cdcRates = list('CDC_RATES', '1000');
const w6 = { rate: size('W6_RATE'), seconds: size('W6_SECONDS'), pairs: size('W6_PAIRS') };
const only = new Set((args.only ?? 'W1,W2,W3,W6').split(',').map((w) => w.trim().toUpperCase()));
const ENV = ['EVENTS', 'AGGREGATES', 'RUNS', 'RATES', 'CDC_RATES', 'SECONDS', 'W3_SECONDS', 'W3_ROUNDS']
  .concat(['W6_RATE', 'W6_SECONDS', 'W6_PAIRS'])
  .filter((name) => process.env[name] !== undefined);
const command = [
  ...ENV.map((n) => `${n}=${process.env[n]}`),
  'npx tsx bench/targets.ts',
  ...process.argv.slice(2),
].join(' ');

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 12 });
const started = new Date();
const raw: string[] = [];
const failures: string[] = [];
const rows: TargetRow[] = [];
/** Lines of raw figures: printed as they come, kept for the report. */
const log = (...lines: string[]): void => {
  for (const line of lines) console.log(line);
  raw.push(...lines);
};
/** Runs one part; a failure is reported and the other parts still run. */
async function part(name: string, body: () => Promise<void>): Promise<void> {
  if (!only.has(name.split(' ')[0]!)) return;
  log('');
  log(`### ${name}`);
  log('');
  const t0 = performance.now();
  try {
    await body();
  } catch (error) {
    const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
    failures.push(`${name}: ${message.split('\n')[0]}`);
    log(`FAILED: ${message}`);
  }
  log(`(${name}: ${((performance.now() - t0) / 60_000).toFixed(1)} min)`);
}

try {
  await part('W1 drain', async () => {
    const contenders: DrainContender[] = [
      { name: POLLING, system: () => txOutboxSystem(), txOutbox: true },
      { name: CDC_TABLE, system: () => txOutboxSystem({ source: 'cdc', via: 'table' }), txOutbox: true },
      { name: CDC_WAL, system: () => txOutboxSystem({ source: 'cdc', via: 'wal' }), txOutbox: true },
      { name: LEAN_RELAY, system: () => leanRelaySystem() },
      { name: LEAN_RELAY_SAME_HEADERS, system: () => leanRelaySystem({ headers: 'same' }) },
    ];
    const options = { events, aggregates, runs, contenders, log };
    let figures: Map<string, DrainFigures> = new Map();
    try {
      figures = await drainPairs(pool, options);
      log('', ...drainPairReport(figures, options));
    } finally {
      rows.push(...w1Rows(figures, events)); // n/a where it failed
    }
  });
  await part('W2 latency', async () => {
    const contenders: LatencyContender[] = [
      { name: POLLING, system: () => txOutboxLatencySystem(), txOutbox: true },
      {
        name: CDC_TABLE,
        system: () => txOutboxLatencySystem({ source: 'cdc', via: 'table' }),
        rates: cdcRates,
        txOutbox: true,
      },
      {
        name: CDC_WAL,
        system: () => txOutboxLatencySystem({ source: 'cdc', via: 'wal' }),
        rates: cdcRates,
        txOutbox: true,
      },
      { name: LEAN_RELAY, system: () => leanRelayLatencySystem() },
      { name: LEAN_RELAY_SAME_HEADERS, system: () => leanRelayLatencySystem({ headers: 'same' }) },
    ];
    const modes = parseModes('separate/steady');
    const allRates = [...new Set([...rates, ...cdcRates])];
    const options = { rates: allRates, seconds: size('SECONDS'), runs, modes, contenders, log };
    let results: Map<string, LatencyResult[]> = new Map();
    try {
      results = await latencyPairs(pool, options);
      log('', ...latencyPairReport(results, options));
    } finally {
      rows.push(...w2Rows(results, modes[0]!.name, rates, cdcRates));
    }
  });
  await part('W3 producer', async () => {
    const w3 = { seconds: size('W3_SECONDS'), rounds: size('W3_ROUNDS') };
    let producer: ProducerRuns | undefined;
    let pgbench: PgbenchRuns | undefined;
    try {
      log(
        `Client side (W3: 8 connections, ${w3.rounds} interleaved rounds of ${w3.seconds} s), TPS per round:`,
      );
      producer = await producerRuns(pool, {
        ...w3,
        variants: [
          'business + bare INSERT',
          'business + enqueue',
          'business + enqueue, caller version',
          'business + enqueue via WAL',
        ],
      });
      for (const [variant, tps] of Object.entries(producer.tps)) {
        if (tps.length > 0) log(`${variant}: ${tps.map((v) => v.toFixed(0)).join(', ')}`);
      }
      log('', `Server side (pgbench -M prepared -c 8 -j 2, ${w3.rounds} rounds of ${w3.seconds} s):`);
      pgbench = await pgbenchWalRuns(pool, { ...w3, schema: 'bench_targets_pgbench', log });
    } finally {
      rows.push(...w3Rows(producer, pgbench));
    }
  });
  await part('W6 held snapshot', async () => {
    const steady: HeldSteadyRun[] = [];
    const drain: HeldDrainRun[] = [];
    const label = (held: boolean): string => (held ? 'held' : 'not held');
    try {
      log(
        `(a) steady: 8 producers offer ${w6.rate} events/s for ${w6.seconds} s, one relay; claim ms (the relay's stats):`,
      );
      for (const held of [false, true]) {
        const r = await heldSteadyRun(pool, { rate: w6.rate, seconds: w6.seconds, held });
        steady.push(r);
        log(
          `${label(held)}: achieved ${r.achievedRate.toFixed(0)} events/s, claim p50 ${fmtMs(r.claim.p50)} ` +
            `p99 ${fmtMs(r.claim.p99)} mean ${fmtMs(r.claim.mean)} max ${fmtMs(r.claim.max)}, ${r.batches} batches, catch-up ${r.catchUpSeconds.toFixed(2)} s, ${r.deadRows} dead rows`,
        );
      }
      log(
        '',
        `(b) drain: snapshot first, then ${events} events over ${aggregates} aggregates; ${w6.pairs} interleaved pair(s):`,
      );
      for (let i = 0; i < w6.pairs; i++) {
        for (const held of [false, true]) {
          const r = await heldDrainRun(pool, { events, aggregates, payloadBytes: 300 }, held);
          drain.push(r);
          log(
            `${label(held)}: ${r.perSecond.toFixed(0)} events/s, claim p50 ${fmtMs(r.claim.p50)} p99 ${fmtMs(r.claim.p99)}, ` +
              `CPU ${JSON.stringify(r.cpu)}, ${r.deadRows} dead rows`,
          );
        }
      }
    } finally {
      rows.push(...w6Rows(steady, drain, `${w6.seconds} s at ${w6.rate.toLocaleString('en-US')} ev/s`));
    }
  });

  const finished = new Date();
  const report = [
    `# Issue 26 targets, ${started.toISOString()}`,
    '',
    `Command: \`${command}\` (${profileName} profile; ${((finished.getTime() - started.getTime()) / 60_000).toFixed(1)} min).`,
    `W1: ${events.toLocaleString('en-US')} events over ${aggregates.toLocaleString('en-US')} aggregates, 300-byte payloads, ${runs} interleaved runs; ` +
      `W2: ${rates.join(' and ')} tx/s (CDC relay: ${cdcRates.join(', ')}), ${size('SECONDS')} s a run, ${runs} rounds. ` +
      'Ratios are of medians; CPU is ms per 1,000 events by process (/proc).',
    '',
    ...markdownTable(rows),
    '',
    ...(failures.length > 0 ? ['Failed parts:', ...failures.map((f) => `- ${f}`), ''] : []),
    '## Raw figures',
    ...raw,
    '',
    '## Machine',
    '',
    '```json',
    JSON.stringify(await machine(pool), null, 2),
    '```',
    '',
  ].join('\n');
  mkdirSync('bench/results', { recursive: true });
  const file = `bench/results/targets-${started.toISOString().replaceAll(':', '-').replace('.', '-')}.md`;
  writeFileSync(file, report);
  console.log(`\n${report}\nWritten to ${file}`);
  if (failures.length > 0) process.exitCode = 1;
} finally {
  await pool.end();
}
