/**
 * The benchmark harness: tx-outbox side by side with the alternatives and with
 * this machine's ceilings, in one run.
 *
 *   npm run bench                 # full profile
 *   npm run bench -- --quick      # about 6 minutes
 *   npm run bench -- --smoke      # under a minute (CI): every workload at a tiny size, figures meaningless
 *   npm run bench -- --only W1,W3 # some workloads (default W1–W6 and the backlog check)
 *   npm run bench -- --only backlog  # the backlog check alone (100,000 events in the full profile)
 *
 * Every configuration runs at least 3 times (the smoke profile: once); the report gives median and
 * min-max, ratios against peers measured in the same run, and the machine.
 * Writes bench/results/<timestamp>.json and .md. Speed is judged here, never
 * in the test suite: no figure is asserted, targets are reported as met/missed. Two things make
 * the exit status 1: a workload (or one system in it) that failed to run, and the backlog check
 * (every event of a backlog delivered exactly once, in per-aggregate order) failing.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { benchContext, DATABASE_URL, fmt, fmtMs, machine, type Summary, summarize } from './lib.js';
import { brokerCeilingSystem } from './systems/broker-ceiling-system.js';
import {
  LEAN_RELAY,
  LEAN_RELAY_SAME_HEADERS,
  leanRelayLatencySystem,
  leanRelaySystem,
} from './systems/lean-relay.js';
import { graphileWorkerSystem } from './systems/peers/graphile-worker.js';
import { naiveLoopSystem } from './systems/peers/naive-loop.js';
import { pgBossSystem } from './systems/peers/pg-boss.js';
import {
  pgTransactionalOutboxPollingSystem,
  pgTransactionalOutboxReplicationSystem,
  ptoReplicationLatencySystem,
} from './systems/peers/pg-transactional-outbox.js';
import { sqlCeilingSystem } from './systems/sql-ceiling.js';
import { txOutboxSystem } from './systems/tx-outbox.js';
import type { BenchContext, CpuPer1000, DrainSystem } from './systems/types.js';
import { type BacklogCheck, backlogCheck } from './workloads/backlog-check.js';
import { type DrainRun, drainRun, simulateHistory } from './workloads/drain.js';
import {
  type ClaimTiming,
  type HeldDrainRun,
  type HeldSteadyRun,
  heldDrainRun,
  heldSteadyRun,
} from './workloads/held-snapshot.js';
import { type IdleCpu, type IdleRelay, idleCpuRun } from './workloads/idle-cpu.js';
import {
  type LatencyResult,
  type LatencySystem,
  latencyRun,
  txOutboxLatencySystem,
} from './workloads/latency.js';
import { PRODUCER_VARIANTS, type ProducerRuns, producerRuns } from './workloads/producer.js';
import { ORM_PRODUCER_VARIANTS, ormProducerRuns } from './workloads/producer-orm.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    smoke: { type: 'boolean', default: false },
    only: { type: 'string' },
    runs: { type: 'string' },
  },
});

interface Profile {
  readonly runs: number;
  readonly events: number;
  readonly aggregates: number;
  readonly peerEvents: Readonly<Record<string, number>>;
  readonly latency: {
    readonly rates: readonly number[];
    /** Offered rates for the CDC relay (both producer modes) and for the replication peer. */
    readonly cdcRates: readonly number[];
    readonly peerRates: readonly number[];
    readonly seconds: number;
    readonly runs: number;
  };
  readonly producer: { readonly seconds: number; readonly rounds: number };
  readonly history: number;
  readonly relays: readonly number[];
  /** Idle CPU: seconds measured (after 2 s of settling). */
  readonly idleSeconds: number;
  /** W2 and idle CPU: how long a relay settles before the measurement (default 1.5 s and 2 s). */
  readonly settleSeconds?: number;
  /** W6 (a): producers' offered events/s and seconds per run; (b): drain pairs (not held, held). */
  readonly heldSnapshot: { readonly rate: number; readonly seconds: number; readonly drainPairs: number };
  /** The backlog check: a backlog this large drained by one relay, every event once, in order. */
  readonly backlog: { readonly events: number; readonly aggregates: number };
}

const PROFILES: Record<'full' | 'quick' | 'smoke', Profile> = {
  full: {
    runs: 3,
    events: 100_000,
    aggregates: 5_000,
    peerEvents: {
      naive: 1_000,
      graphile: 30_000,
      graphileOrdered: 3_000,
      pgboss: 20_000,
      ptoReplication: 30_000,
      ptoPolling: 300,
    },
    latency: {
      rates: [200, 1000, 5000],
      cdcRates: [1000, 5000],
      peerRates: [1000, 5000],
      seconds: 20,
      runs: 3,
    },
    producer: { seconds: 10, rounds: 3 },
    history: 5_000_000,
    relays: [1, 2, 4],
    idleSeconds: 10,
    heldSnapshot: { rate: 1000, seconds: 600, drainPairs: 3 },
    // The shape of the suite's former 100,000-event backlog test (test/failure/backlog.test.ts).
    backlog: { events: 100_000, aggregates: 5_000 },
  },
  quick: {
    runs: 3,
    events: 10_000,
    aggregates: 1_000,
    peerEvents: {
      naive: 200,
      graphile: 2_000,
      graphileOrdered: 500,
      pgboss: 2_000,
      ptoReplication: 300,
      ptoPolling: 30,
    },
    latency: { rates: [200, 1000], cdcRates: [1000], peerRates: [], seconds: 5, runs: 1 },
    producer: { seconds: 3, rounds: 3 },
    history: 300_000,
    relays: [1, 2],
    idleSeconds: 5,
    // W6 kept short (the held-snapshot effect shows within seconds).
    heldSnapshot: { rate: 1000, seconds: 10, drainPairs: 1 },
    backlog: { events: 10_000, aggregates: 1_000 },
  },
  // CI: every workload and every system once, at a size that only proves it still runs.
  smoke: {
    runs: 1,
    events: 500,
    aggregates: 50,
    peerEvents: {
      naive: 50,
      graphile: 200,
      graphileOrdered: 50,
      pgboss: 200,
      ptoReplication: 50,
      ptoPolling: 5,
    },
    latency: { rates: [200], cdcRates: [200], peerRates: [200], seconds: 1, runs: 1 },
    producer: { seconds: 0.5, rounds: 1 },
    history: 2_000,
    relays: [1, 2],
    idleSeconds: 0.5,
    settleSeconds: 0.3,
    heldSnapshot: { rate: 200, seconds: 1, drainPairs: 1 },
    backlog: { events: 1_000, aggregates: 100 },
  },
};

if (args.quick && args.smoke) throw new Error('--quick and --smoke: choose one profile');
const profileName = args.smoke ? 'smoke' : args.quick ? 'quick' : 'full';
const profile: Profile = { ...PROFILES[profileName], ...(args.runs ? { runs: Number(args.runs) } : {}) };
const only = new Set(
  (args.only ?? 'W1,W2,W3,W4,W5,W6,backlog').split(',').map((w) => w.trim().toUpperCase()),
);
/** What failed to run, or failed the backlog check: any of it makes the exit status 1. */
const failures: string[] = [];
const failed = (what: string, error: unknown): string => {
  const message = error instanceof Error ? error.message : String(error);
  failures.push(`${what}: ${message.split('\n')[0]}`);
  return message;
};
const PAYLOAD_BYTES = 300;

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 12 });
const report: Record<string, unknown> = { profile: profileName, startedAt: new Date().toISOString() };
const lines: string[] = [];
const out = (line = ''): void => {
  console.log(line);
  lines.push(line);
};
const range = (s: Summary, f: (n: number) => string = fmt): string =>
  `${f(s.median)} [${f(s.min)}–${f(s.max)}]`;

async function repeat(
  system: DrainSystem,
  events: number,
  relays = 1,
  extra: Parameters<typeof drainRun>[3] = {},
) {
  const runs: DrainRun[] = [];
  for (let i = 0; i < profile.runs; i++) {
    const run = await drainRun(
      pool,
      system,
      { events, aggregates: profile.aggregates, payloadBytes: PAYLOAD_BYTES, relays },
      extra,
    );
    runs.push(run);
    if (run.skipped) break;
  }
  return runs;
}

/** Median CPU ms per 1,000 events by process over the runs that measured it. */
function cpuOf(runs: ReadonlyArray<{ readonly cpu?: CpuPer1000 }>): CpuPer1000 | undefined {
  const measured = runs.flatMap((r) => (r.cpu === undefined ? [] : [r.cpu]));
  if (measured.length === 0) return undefined;
  const median = (key: keyof CpuPer1000): number | undefined => {
    const values = measured.flatMap((c) => (c[key] === undefined ? [] : [c[key]!]));
    return values.length === 0 ? undefined : summarize(values).median;
  };
  const relay = median('relay');
  const postgres = median('postgres');
  const nats = median('nats');
  return {
    ...(relay === undefined ? {} : { relay }),
    ...(postgres === undefined ? {} : { postgres }),
    ...(nats === undefined ? {} : { nats }),
  };
}

const fmtCpu = (n: number | undefined): string => (n === undefined ? 'n/a' : n.toFixed(n < 10 ? 1 : 0));
const cpuCells = (c: CpuPer1000 | undefined): string =>
  `${fmtCpu(c?.relay)} | ${fmtCpu(c?.postgres)} | ${fmtCpu(c?.nats)}`;
const CPU_NOTE =
  'CPU ms per 1,000 events, median of the runs, read from /proc over the timed part: the relay (or listener) process; ' +
  'PostgreSQL = the backends of its own connections (pool, and the walsender that decodes for a replication reader), ' +
  'background processes (WAL writer, autovacuum, checkpointer) not counted; NATS = the nats-server process.';

function rateOf(runs: readonly DrainRun[]): Summary | undefined {
  const ok = runs.filter((r) => !r.skipped);
  return ok.length === 0 ? undefined : summarize(ok.map((r) => r.perSecond));
}

const CDC_TABLE = 'tx-outbox CDC relay (table mode)';
const CDC_TABLE_AT_START =
  'tx-outbox CDC relay (table mode, backlog in the table at start: its polling path)';
const CDC_WAL = 'tx-outbox CDC relay (WAL-mode producers)';

async function w1(): Promise<Record<string, unknown>> {
  out('## W1 — backlog drain into NATS JetStream');
  out();
  const systems: Array<[string, DrainSystem, number]> = [
    ['tx-outbox', txOutboxSystem(), profile.events],
    [LEAN_RELAY, leanRelaySystem(), profile.events],
    [LEAN_RELAY_SAME_HEADERS, leanRelaySystem({ headers: 'same' }), profile.events],
    ['tx-outbox (history)', txOutboxSystem({ history: true }), profile.events],
    [CDC_TABLE, txOutboxSystem({ source: 'cdc', backlog: 'while-streaming' }), profile.events],
    [CDC_TABLE_AT_START, txOutboxSystem({ source: 'cdc' }), profile.events],
    [CDC_WAL, txOutboxSystem({ source: 'cdc', via: 'wal' }), profile.events],
    ['ceiling (a): SQL claim+delete, no broker', sqlCeilingSystem(), profile.events],
    ["ceiling (a'): the same, pipelined as the relay", sqlCeilingSystem({ pipelined: true }), profile.events],
    ['ceiling (b): broker-only lean publish loop, no database', brokerCeilingSystem('raw'), profile.events],
    ['broker-only js.publish() loop', brokerCeilingSystem('client'), profile.events],
    [
      'graphile-worker (batched: localQueue; order not guaranteed)',
      graphileWorkerSystem({ localQueue: true }),
      profile.peerEvents['graphile']!,
    ],
    [
      'graphile-worker (queue per aggregate: ordered)',
      graphileWorkerSystem(),
      profile.peerEvents['graphileOrdered']!,
    ],
    ['pg-boss', pgBossSystem(), profile.peerEvents['pgboss']!],
    [
      'pg-transactional-outbox (replication)',
      pgTransactionalOutboxReplicationSystem(),
      profile.peerEvents['ptoReplication']!,
    ],
    [
      'pg-transactional-outbox (polling)',
      pgTransactionalOutboxPollingSystem(),
      profile.peerEvents['ptoPolling']!,
    ],
    ['naive polling loop', naiveLoopSystem(), profile.peerEvents['naive']!],
  ];
  const rates: Record<string, Summary | string> = {};
  const cpu: Record<string, CpuPer1000> = {};
  const notes: string[] = [];
  let memory: number[] = [];
  for (const [name, system, events] of systems) {
    let runs: DrainRun[];
    try {
      runs = await repeat(system, events);
    } catch (error) {
      // One system failing (e.g. a relay that is not built yet) must not lose the others' figures.
      const message = failed(`W1 ${name}`, error);
      rates[name] = `failed: ${message.split('\n')[0]}`;
      console.error(`  W1 ${name}: ${rates[name]}`);
      continue;
    }
    const skipped = runs.find((r) => r.skipped)?.skipped;
    const rate = rateOf(runs);
    rates[name] = rate ?? skipped ?? 'skipped';
    const used = cpuOf(runs);
    if (used) cpu[name] = used;
    for (const r of runs) if (r.note) notes.push(`${name}: ${r.note}`);
    if (name === 'tx-outbox') memory = runs.flatMap((r) => (r.peakRssMb === undefined ? [] : [r.peakRssMb]));
    console.error(`  W1 ${name}: ${rate ? range(rate) : skipped}`);
  }
  const ours = rates['tx-outbox'] as Summary;
  const a = rates['ceiling (a): SQL claim+delete, no broker'] as Summary;
  const b = rates['ceiling (b): broker-only lean publish loop, no database'] as Summary;
  const a2 = rates["ceiling (a'): the same, pipelined as the relay"] as Summary;
  const ceiling = Math.min(a.median, b.median);
  const strict = Math.min(Math.max(a.median, a2.median), b.median);
  out(
    `Backlog ${fmt(profile.events)} events over ${fmt(profile.aggregates)} aggregates (peers: smaller backlogs, same shape), ${PAYLOAD_BYTES}-byte JSON payloads; events/s, median [min–max] of ${profile.runs} runs.`,
  );
  out();
  out('| system | backlog | events/s | tx-outbox is |');
  out('|---|---|---|---|');
  for (const [name, , events] of systems) {
    const r = rates[name]!;
    if (typeof r === 'string') out(`| ${name} | ${fmt(events)} | ${r} | |`);
    else out(`| ${name} | ${fmt(events)} | ${range(r)} | ${(ours.median / r.median).toFixed(2)}× |`);
  }
  out();
  out(
    `Relay ceiling min(a, b) = ${fmt(ceiling)} events/s; tx-outbox reaches ${(ours.median / ceiling).toFixed(2)}× of it (target ≥ 0.65). ` +
      `Against the stricter min(max(a, a'), b) = ${fmt(strict)}: ${(ours.median / strict).toFixed(2)}×.`,
  );
  const cdcRatio = (name: string): string => {
    const r = rates[name];
    return typeof r === 'string' || !r ? 'n/a' : `${(r.median / ours.median).toFixed(2)}×`;
  };
  out(
    `CDC relay W1 vs the polling relay (target ≥ 1.0×): table mode ${cdcRatio(CDC_TABLE)} ` +
      `(backlog at start, polling path: ${cdcRatio(CDC_TABLE_AT_START)}), WAL-mode producers ${cdcRatio(CDC_WAL)}.`,
  );
  const history = rates['tx-outbox (history)'];
  if (typeof history !== 'string' && history) {
    out(`Delivery history on: ${(history.median / ours.median).toFixed(2)}× history off (target ≥ 0.9).`);
  }
  if (memory.length > 0) {
    const m = summarize(memory);
    out(`Relay process peak RSS during W1: ${range(m)} MB (target ≤ 150 MB).`);
    rates['peakRssMb'] = m;
  }
  out();
  const lean = leanComparison(rates, cpu);
  out('CPU by process during W1 (ms per 1,000 events):');
  out();
  out('| system | relay process | PostgreSQL | NATS |');
  out('|---|---|---|---|');
  for (const [name] of systems) {
    const failed = typeof rates[name] === 'string' ? ' (did not run)' : '';
    out(`| ${name}${cpu[name] ? '' : failed} | ${cpuCells(cpu[name])} |`);
  }
  out();
  out(
    `${CPU_NOTE} n/a: the system runs inside the harness process (the ceilings and the in-process peers), ` +
      'where its CPU cannot be told apart from the harness and its connections carry no application_name of their own.',
  );
  out();
  return { ...rates, cpu, ...(lean ? { lean } : {}) };
}

const met = (ok: boolean): string => (ok ? 'met' : 'missed');

/**
 * W1's issue-26 targets: tx-outbox against the lean reference relay of the same run, and against
 * the lean relay sending tx-outbox's headers (what the guarantees cost, the wire format aside).
 */
function leanComparison(
  rates: Record<string, Summary | string>,
  cpu: Record<string, CpuPer1000>,
): Record<string, number> | undefined {
  const ours = rates['tx-outbox'];
  if (typeof ours !== 'object') {
    out(`tx-outbox against the lean relays: n/a (its run failed).`);
    out();
    return undefined;
  }
  const result: Record<string, number> = {};
  out('tx-outbox against the lean relays, same run, same backlog (medians):');
  out();
  out('| measure | against | tx-outbox | lean relay | tx-outbox / lean | target | |');
  out('|---|---|---|---|---|---|---|');
  const leans: Array<[string, string, string, { drain: number; postgres: number; relay: number }]> = [
    [LEAN_RELAY, 'lean relay', '', { drain: 0.85, postgres: 1.5, relay: 1.6 }],
    [
      LEAN_RELAY_SAME_HEADERS,
      'lean relay, same headers',
      'SameHeaders',
      { drain: 0.95, postgres: 1.5, relay: 1.3 },
    ],
  ];
  for (const [name, label, suffix, targets] of leans) {
    const lean = rates[name];
    if (typeof lean !== 'object') {
      out(
        `| drain, events/s | ${label} | ${fmt(ours.median)} | n/a (its run failed) | n/a | ≥ ${targets.drain}× | n/a |`,
      );
      continue;
    }
    const drain = ours.median / lean.median;
    result[`drain${suffix}`] = drain;
    out(
      `| drain, events/s | ${label} | ${fmt(ours.median)} | ${fmt(lean.median)} | ${drain.toFixed(2)}× | ≥ ${targets.drain}× | ${met(drain >= targets.drain)} |`,
    );
    const row = (measure: string, key: 'postgres' | 'relay'): void => {
      const a = cpu['tx-outbox']?.[key];
      const b = cpu[name]?.[key];
      const target = targets[key];
      if (a === undefined || b === undefined || b === 0) {
        out(`| ${measure} | ${label} | ${fmtCpu(a)} | ${fmtCpu(b)} | n/a | ≤ ${target}× | n/a |`);
        return;
      }
      result[`${key}${suffix}`] = a / b;
      out(
        `| ${measure} | ${label} | ${fmtCpu(a)} | ${fmtCpu(b)} | ${(a / b).toFixed(2)}× | ≤ ${target}× | ${met(a / b <= target)} |`,
      );
    };
    row('PostgreSQL CPU, ms per 1,000 events', 'postgres');
    row('relay process CPU, ms per 1,000 events', 'relay');
  }
  out();
  out(
    'The lean relay (bench/lean-relay-process.ts, compiled, in its own process, measured as the relay is): one connection, ' +
      '`SELECT` of the columns it sends, 1,000 pending rows in id order `FOR UPDATE SKIP LOCKED`, the batch written to NATS ' +
      'as core publishes with a reply subject (64 KB writes, one `Nats-Msg-Id` header each), every PubAck awaited on one ' +
      "subscription, `DELETE … WHERE id = ANY($1)`, COMMIT; the relay's session settings (synchronous_commit off). " +
      "The same-headers variant reads the envelope's columns and sends, per message, the header block tx-outbox's NATS " +
      "publisher sends (the CloudEvents binding, `Nats-Msg-Id`, `Nats-Expected-Stream`), built by the library's own functions.",
  );
  out();
  return result;
}

async function w2(): Promise<Array<LatencyResult & { system: string }>> {
  out('## W2 — steady-state latency, commit → broker consumer');
  out();
  out(
    `8 producer connections, business row + event per transaction, ${profile.latency.seconds} s per run; ms; ` +
      `CPU ms per 1,000 events over the run (relay process | PostgreSQL | NATS, as in W1). ` +
      'The producers and the consumer that times the receipts run in processes of their own, on one monotonic clock, ' +
      'one schedule for all connections (bench/workloads/latency-ends.ts); "late p99": how late the p99 transaction started against its schedule.',
  );
  out();
  out(
    '| system | offered tx/s | achieved tx/s | p50 | p95 | p99 | max | late p99 | CPU: relay | PostgreSQL | NATS |',
  );
  out('|---|---|---|---|---|---|---|---|---|---|---|');
  const cases: Array<[() => LatencySystem, readonly number[]]> = [
    [() => txOutboxLatencySystem(), profile.latency.rates],
    [() => leanRelayLatencySystem(), profile.latency.rates],
    [() => leanRelayLatencySystem({ headers: 'same' }), profile.latency.rates],
    [() => txOutboxLatencySystem({ source: 'cdc' }), profile.latency.cdcRates],
    [() => txOutboxLatencySystem({ source: 'cdc', via: 'wal' }), profile.latency.cdcRates],
    [() => ptoReplicationLatencySystem(), profile.latency.peerRates],
  ];
  const all: Array<LatencyResult & { system: string }> = [];
  const p99At1000: Record<string, number> = {};
  /** Median p50 and p99 by system and rate. */
  const medians: Record<string, Record<number, { p50: number; p99: number }>> = {};
  /** Runs where events of an aggregate arrived seconds late (held back, not slow). */
  const heldNotes: string[] = [];
  for (const [make, rates] of cases) {
    for (const rate of rates) {
      const name = make().name;
      const runs: LatencyResult[] = [];
      try {
        for (let i = 0; i < profile.latency.runs; i++) {
          runs.push(
            await latencyRun(pool, {
              rate,
              seconds: profile.latency.seconds,
              system: make(),
              ...(profile.settleSeconds === undefined ? {} : { settleMs: profile.settleSeconds * 1000 }),
            }),
          );
        }
      } catch (error) {
        const message = failed(`W2 ${name} ${rate} tx/s`, error);
        out(`| ${name} | ${rate} | failed: ${message.split('\n')[0]} | | | | | | | | |`);
        console.error(`  W2 ${name} ${rate} tx/s: failed: ${message}`);
        continue;
      }
      all.push(...runs.map((r) => ({ ...r, system: name })));
      const s = (f: (r: LatencyResult) => number) => summarize(runs.map(f));
      const ms = (f: (r: LatencyResult) => number) => range(s(f), fmtMs);
      if (rate === 1000) p99At1000[name] = s((r) => r.p99).median;
      medians[name] = {
        ...medians[name],
        [rate]: { p50: s((r) => r.p50).median, p99: s((r) => r.p99).median },
      };
      out(
        `| ${name} | ${rate} | ${range(s((r) => r.achievedRate))} | ${ms((r) => r.p50)} | ${ms((r) => r.p95)} | ` +
          `${ms((r) => r.p99)} | ${ms((r) => r.max)} | ${fmtMs(s((r) => r.lateness.p99).median)} | ${cpuCells(cpuOf(runs))} |`,
      );
      console.error(`  W2 ${name} ${rate} tx/s: p99 ${fmtMs(s((r) => r.p99).median)} ms`);
      const held = runs.filter((r) => r.overSecond.events > 0);
      if (held.length > 0) {
        heldNotes.push(
          `${name}, ${rate} tx/s: in ${held.length} of ${runs.length} runs events arrived more than 1 s after their commit ` +
            `(${held.map((r) => `${r.overSecond.events} events of ${r.overSecond.aggregates} aggregate(s)`).join('; ')}).`,
        );
      }
    }
  }
  out();
  for (const note of heldNotes) out(`- ${note}`);
  if (heldNotes.length > 0) out();
  out('Targets: at 1,000 tx/s p99 ≤ 10 ms with the offered rate reached; at 200 tx/s p99 ≤ 5 ms.');
  const polling = medians['tx-outbox (polling relay)'];
  if (polling?.[1000])
    out(
      `tx-outbox's p99 at 1,000 tx/s: ${fmtMs(polling[1000].p99)} ms, target ≤ 5 ms (${met(polling[1000].p99 <= 5)}).`,
    );
  // Issue 26: p50 and p99 within 1.25× of the lean relay's at each rate.
  for (const lean of [LEAN_RELAY, LEAN_RELAY_SAME_HEADERS]) {
    const parts: string[] = [];
    for (const rate of profile.latency.rates) {
      const ours = polling?.[rate];
      const theirs = medians[lean]?.[rate];
      if (!ours || !theirs) continue;
      const ratio = (a: number, b: number): string => `${(a / b).toFixed(2)}× (${met(a <= 1.25 * b)})`;
      parts.push(`${rate} tx/s p50 ${ratio(ours.p50, theirs.p50)}, p99 ${ratio(ours.p99, theirs.p99)}`);
    }
    out(
      `tx-outbox against the ${lean} (it sleeps 1 ms between empty claims), target ≤ 1.25×: ` +
        (parts.length > 0 ? parts.join('; ') : 'n/a (a run failed)') +
        '.',
    );
  }
  const cdc = Object.entries(p99At1000).filter(([name]) => name.includes('CDC'));
  if (cdc.length > 0) {
    out(
      `CDC relay p99 at 1,000 tx/s (target ≤ 10 ms): ${cdc
        .map(
          ([name, p99]) =>
            `${name.replace('tx-outbox CDC relay ', '')} ${fmtMs(p99)} ms (${p99 <= 10 ? 'met' : 'missed'})`,
        )
        .join(', ')}.`,
    );
  }
  out();
  return all;
}

/** Idle CPU (with W2): a relay on an empty outbox, as % of one core. */
async function idleCpu(): Promise<Record<string, IdleCpu[]>> {
  out('### Idle CPU');
  out();
  out(
    `One relay process on an empty, migrated outbox; after 2 s of settling, CPU over ${profile.idleSeconds} s ` +
      `(${profile.latency.runs} run${profile.latency.runs > 1 ? 's, median' : ''}), % of one core, read from /proc as in W1.`,
  );
  out();
  out('| relay | relay process | its PostgreSQL backends | together | NATS | target ≤ 1 % of a core |');
  out('|---|---|---|---|---|---|');
  const relays: Array<[string, IdleRelay]> = [
    ['tx-outbox (polling relay)', 'tx-outbox'],
    [`${LEAN_RELAY}, 1 ms sleep between empty claims`, 'lean'],
  ];
  const result: Record<string, IdleCpu[]> = {};
  for (const [name, relay] of relays) {
    const runs: IdleCpu[] = [];
    try {
      for (let i = 0; i < profile.latency.runs; i++) {
        runs.push(
          await idleCpuRun(pool, {
            relay,
            seconds: profile.idleSeconds,
            ...(profile.settleSeconds === undefined ? {} : { settleSeconds: profile.settleSeconds }),
          }),
        );
      }
    } catch (error) {
      const message = failed(`idle CPU ${name}`, error);
      out(`| ${name} | failed: ${message.split('\n')[0]} | | | | |`);
      continue;
    }
    result[name] = runs;
    const median = (f: (r: IdleCpu) => number | undefined): number | undefined => {
      const values = runs.flatMap((r) => (f(r) === undefined ? [] : [f(r)!]));
      return values.length === 0 ? undefined : summarize(values).median;
    };
    const relayCpu = median((r) => r.relay);
    const postgres = median((r) => r.postgres);
    const together = median((r) =>
      r.relay === undefined || r.postgres === undefined ? undefined : r.relay + r.postgres,
    );
    const pct = (n: number | undefined): string => (n === undefined ? 'n/a' : `${n.toFixed(2)} %`);
    const verdict = together === undefined ? 'n/a' : met(together <= 1);
    out(
      `| ${name} | ${pct(relayCpu)} | ${pct(postgres)} | ${pct(together)} | ${pct(median((r) => r.nats))} | ${relay === 'lean' ? `(${verdict}: for comparison)` : verdict} |`,
    );
    console.error(`  idle CPU ${name}: ${pct(together)}`);
  }
  out();
  out(
    'The target is judged on the relay process and its PostgreSQL backends together. The relay process is read in 10 ms ticks (/proc/<pid>/stat): over a short window a tick is 0.1–0.2 % of a core.',
  );
  out();
  return result;
}

async function w3(): Promise<ProducerRuns & { orm: Record<string, number[]> }> {
  out('## W3 — producer overhead');
  out();
  const result = await producerRuns(pool, profile.producer);
  const bare = summarize(result.tps['business + bare INSERT']).median;
  out(
    `8 connections, ${profile.producer.rounds} interleaved rounds of ${profile.producer.seconds} s; the relay stopped except where it drains.`,
  );
  out();
  out(
    '| transaction | TPS | ratio to business + bare INSERT | CPU µs/tx: PostgreSQL backends | CPU µs/tx: this process |',
  );
  out('|---|---|---|---|---|');
  for (const v of PRODUCER_VARIANTS) {
    const s = summarize(result.tps[v]);
    const database = summarize(result.databaseCpuUs[v]).median;
    const client = summarize(result.clientCpuUs[v]).median;
    out(
      `| ${v} | ${range(s)} | ${(s.median / bare).toFixed(2)} | ${database.toFixed(0)} | ${client.toFixed(0)} |`,
    );
  }
  out();
  out(
    'Targets: business + enqueue ≥ 0.80×, business + enqueue with a caller version ≥ 0.95× business + bare INSERT of the same payload.',
  );
  out();
  const orm = await ormProducerRuns(pool, profile.producer);
  out('Through an ORM (both statements in its own transaction API, 8 concurrent transactions):');
  out();
  out(
    "| transaction | TPS | ratio to the same ORM's business + bare INSERT | ratio to business + bare INSERT (node-postgres) |",
  );
  out('|---|---|---|---|');
  for (const v of ORM_PRODUCER_VARIANTS) {
    const s = summarize(orm[v]);
    const own = summarize(
      orm[v.startsWith('Drizzle') ? 'Drizzle: business + bare INSERT' : 'Prisma: business + bare INSERT'],
    ).median;
    out(`| ${v} | ${range(s)} | ${(s.median / own).toFixed(2)} | ${(s.median / bare).toFixed(2)} |`);
  }
  out();
  return { ...result, orm };
}

/** W1 for tx-outbox, `runs` times in one schema (load, drain, load, drain …) after `prepare`. */
async function drainsInOneSchema(prepare: (ctx: BenchContext) => Promise<void>): Promise<Summary> {
  const ctx = await benchContext(pool);
  const system = txOutboxSystem();
  const workload = {
    events: profile.events,
    aggregates: profile.aggregates,
    payloadBytes: PAYLOAD_BYTES,
    relays: 1,
  };
  try {
    await prepare(ctx);
    const rates: number[] = [];
    for (let i = 0; i < profile.runs; i++) {
      await system.load(ctx, workload);
      const r = await system.drain(ctx, workload);
      rates.push(r.delivered / r.seconds);
    }
    return summarize(rates);
  } finally {
    await system.teardown(ctx);
    await ctx.close();
  }
}

async function w4(): Promise<Record<string, Summary>> {
  out('## W4 — history independence');
  out();
  const empty = await drainsInOneSchema(async () => {});
  const withHistory = await drainsInOneSchema((ctx) =>
    simulateHistory(ctx, profile.history, Math.max(1, Math.floor(profile.history / 10))),
  );
  out(
    `W1 (tx-outbox, ${fmt(profile.events)} events, ${profile.runs} drains in one schema) on a fresh outbox vs one that already delivered ${fmt(profile.history)} events (${fmt(profile.history / 10)} aggregates).`,
  );
  out();
  out('| history | events/s | ratio |');
  out('|---|---|---|');
  out(`| none | ${range(empty)} | 1.00 |`);
  out(
    `| ${fmt(profile.history)} delivered | ${range(withHistory)} | ${(withHistory.median / empty.median).toFixed(2)} |`,
  );
  out();
  out('Target: ≥ 0.9× the empty-history rate.');
  out();
  return { empty, withHistory };
}

async function w5(): Promise<Record<string, { rate: Summary; violations: number }>> {
  out('## W5 — several relays over the same partitions');
  out();
  out('| relays | events/s | ratio to 1 relay | per-aggregate order violations |');
  out('|---|---|---|---|');
  const result: Record<string, { rate: Summary; violations: number }> = {};
  for (const n of profile.relays) {
    const runs = await repeat(txOutboxSystem(), profile.events, n, { checkOrder: true });
    const rate = rateOf(runs)!;
    const violations = runs.reduce((acc, r) => acc + (r.orderViolations ?? 0), 0);
    result[String(n)] = { rate, violations };
    const one = result['1']!.rate.median;
    out(`| ${n} | ${range(rate)} | ${(rate.median / one).toFixed(2)} | ${violations} |`);
  }
  out();
  out('Target: 2 relays ≥ 1.0× one relay, order held.');
  out();
  return result;
}

async function w6(): Promise<{ steady: HeldSteadyRun[]; drain: HeldDrainRun[] }> {
  out('## W6 — a snapshot held on another connection');
  out();
  const { rows } = await pool.query<{ autovacuum: string }>(
    "SELECT current_setting('autovacuum') AS autovacuum",
  );
  out(
    'Each phase runs without and with a snapshot held on another connection (`BEGIN ISOLATION LEVEL REPEATABLE READ; ' +
      'SELECT 1 FROM <schema>.events LIMIT 1;`, idle in that transaction until the phase ends, then ROLLBACK): ' +
      'PostgreSQL can then neither prune the rows the relay deletes nor mark their index entries dead. ' +
      `Claim times are the relay's own (stats.timings.claim, ms, over its lifetime); autovacuum is ${rows[0]?.autovacuum ?? 'n/a'} on this server.`,
  );
  out();
  const ms = (t: ClaimTiming, key: keyof ClaimTiming): string => fmtMs(t[key]);
  const label = (held: boolean): string => (held ? 'held' : 'not held');
  const steady: HeldSteadyRun[] = [];
  const { rate, seconds } = profile.heldSnapshot;
  try {
    for (const held of [false, true]) {
      steady.push(await heldSteadyRun(pool, { rate, seconds, held }));
      console.error(`  W6 steady ${label(held)}: claim p99 ${fmtMs(steady.at(-1)!.claim.p99)} ms`);
    }
  } catch (error) {
    const message = failed('W6 steady', error);
    out(`(a) steady: failed: ${message.split('\n')[0]}`);
    console.error(`  W6 steady: failed: ${message}`);
  }
  out(
    `(a) Steady: 8 producers (business row + enqueue per transaction) offer ${fmt(rate)} events/s for ${seconds} s; one relay process drains.`,
  );
  out();
  out(
    '| snapshot | achieved events/s | claim p50 | claim p99 | claim mean | claim max | batches | catch-up after producers stop, s | dead rows at the end |',
  );
  out('|---|---|---|---|---|---|---|---|---|');
  for (const r of steady) {
    out(
      `| ${label(r.held)} | ${fmt(r.achievedRate)} | ${ms(r.claim, 'p50')} | ${ms(r.claim, 'p99')} | ${ms(r.claim, 'mean')} | ` +
        `${ms(r.claim, 'max')} | ${fmt(r.batches)} | ${r.catchUpSeconds.toFixed(2)} | ${fmt(r.deadRows)} |`,
    );
  }
  out();
  const [free, held] = [steady.find((r) => !r.held), steady.find((r) => r.held)];
  if (free && held) {
    const ratio = held.claim.p99 / free.claim.p99;
    out(
      `Claim p99 held / not held: ${fmtMs(held.claim.p99)} / ${fmtMs(free.claim.p99)} ms = ${ratio.toFixed(2)}× (target ≤ 2×: ${Number.isFinite(ratio) ? met(ratio <= 2) : 'n/a'}).`,
    );
    out();
  }
  const drain: HeldDrainRun[] = [];
  const workload = { events: profile.events, aggregates: profile.aggregates, payloadBytes: PAYLOAD_BYTES };
  try {
    // Interleaved (not held, held, not held …) so that a noisy moment hits both sides alike.
    for (let i = 0; i < profile.heldSnapshot.drainPairs; i++) {
      for (const h of [false, true]) {
        drain.push(await heldDrainRun(pool, workload, h));
        console.error(`  W6 drain ${label(h)}: ${fmt(drain.at(-1)!.perSecond)} events/s`);
      }
    }
  } catch (error) {
    const message = failed('W6 drain', error);
    out(`(b) drain: failed: ${message.split('\n')[0]}`);
    console.error(`  W6 drain: failed: ${message}`);
  }
  out(
    `(b) Drain: the snapshot is taken first, then a backlog of ${fmt(profile.events)} events over ${fmt(profile.aggregates)} aggregates ` +
      `is loaded (as W1) and one relay process drains it; ${profile.runs} runs of each, interleaved, median [min–max].`,
  );
  out();
  out(
    '| snapshot | events/s | claim p50 | claim p99 | claim mean | batches | CPU: relay | PostgreSQL | NATS |',
  );
  out('|---|---|---|---|---|---|---|---|---|');
  const perSecond: Partial<Record<'held' | 'free', Summary>> = {};
  for (const h of [false, true]) {
    const runs = drain.filter((r) => r.held === h);
    if (runs.length === 0) continue;
    const median = (f: (r: HeldDrainRun) => number): number => summarize(runs.map(f)).median;
    const rate = summarize(runs.map((r) => r.perSecond));
    perSecond[h ? 'held' : 'free'] = rate;
    out(
      `| ${label(h)} | ${range(rate)} | ${fmtMs(median((r) => r.claim.p50))} | ${fmtMs(median((r) => r.claim.p99))} | ` +
        `${fmtMs(median((r) => r.claim.mean))} | ${fmt(median((r) => r.batches))} | ${cpuCells(cpuOf(runs))} |`,
    );
  }
  out();
  if (perSecond.free && perSecond.held) {
    const ratio = perSecond.held.median / perSecond.free.median;
    out(
      `Drain held / not held: ${fmt(perSecond.held.median)} / ${fmt(perSecond.free.median)} events/s = ${ratio.toFixed(2)}× (target ≥ 0.95×: ${met(ratio >= 0.95)}).`,
    );
    out();
  }
  out(
    `Claim times in ms, medians of the runs; CPU as in W1, ms per 1,000 events. (a) runs once each (${seconds} s; the full profile 600 s).`,
  );
  out();
  return { steady, drain };
}

/** The backlog check: every event of a backlog delivered exactly once, in per-aggregate order. */
async function backlog(): Promise<BacklogCheck | string> {
  out('## Backlog check — every event once, in per-aggregate order');
  out();
  const { events, aggregates } = profile.backlog;
  let check: BacklogCheck;
  try {
    check = await backlogCheck(pool, { events, aggregates, payloadBytes: PAYLOAD_BYTES, timeoutMs: 600_000 });
  } catch (error) {
    const message = failed('backlog check', error);
    out(`A backlog of ${fmt(events)} events: failed: ${message.split('\n')[0]}`);
    out();
    return `failed: ${message}`;
  }
  out(
    `A backlog of ${fmt(events)} pending events over ${fmt(aggregates)} aggregates, one relay process: ` +
      `drained at ${fmt(check.perSecond)} events/s (a figure, not judged); the stream holds ${fmt(check.messages)} ` +
      `messages, ${check.orderViolations} out of per-aggregate order: ${check.ok ? 'passed' : 'FAILED'}.`,
  );
  out();
  if (!check.ok)
    failures.push(
      `backlog check: ${check.messages} messages of ${events}, ${check.orderViolations} violations`,
    );
  console.error(`  backlog check: ${check.ok ? 'passed' : 'FAILED'}`);
  return check;
}

// The smoke profile runs in CI: a workload that hangs must fail it, not stall it.
if (profileName === 'smoke') {
  setTimeout(() => {
    console.error('bench --smoke: still running after 300 s, a workload hangs');
    process.exit(1);
  }, 300_000).unref();
}

const started = performance.now();
try {
  report['machine'] = await machine(pool);
  out(`# tx-outbox benchmark (${profileName} profile)`);
  out();
  out(`Machine: ${JSON.stringify(report['machine'])}`);
  out();
  const workloads: Array<[string, string, () => Promise<unknown>]> = [
    ['W1', 'W1', w1],
    ['W2', 'W2', w2],
    ['W2', 'idleCpu', idleCpu],
    ['W3', 'W3', w3],
    ['W4', 'W4', w4],
    ['W5', 'W5', w5],
    ['W6', 'W6', w6],
    ['BACKLOG', 'backlog', backlog],
  ];
  for (const [selector, key, run] of workloads) {
    if (!only.has(selector)) continue;
    const t0 = performance.now();
    report[key] = await run();
    console.error(`  ${key}: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  }
} finally {
  await pool.end();
}
const seconds = (performance.now() - started) / 1000;
const flag = profileName === 'full' ? '' : ` -- --${profileName}`;
out(`Total ${seconds.toFixed(0)} s. Command: npm run bench${flag}`);
report['seconds'] = seconds;
report['failures'] = failures;
mkdirSync('bench/results', { recursive: true });
const stamp = new Date().toISOString().replace(/[:.]/g, '-');
writeFileSync(`bench/results/${profileName}-${stamp}.json`, `${JSON.stringify(report, null, 2)}\n`);
writeFileSync(`bench/results/${profileName}-${stamp}.md`, `${lines.join('\n')}\n`);
console.error(`written bench/results/${profileName}-${stamp}.{json,md}`);
if (failures.length > 0) {
  console.error(`bench: ${failures.length} failure(s):\n  ${failures.join('\n  ')}`);
  process.exitCode = 1;
} else if (profileName === 'smoke') {
  console.error(`bench --smoke: every workload ran (${seconds.toFixed(0)} s); its figures mean nothing`);
}
