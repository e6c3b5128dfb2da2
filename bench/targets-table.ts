/**
 * The rows of issue 26's targets table (bench/targets.ts) from the figures of one run: each as
 * measured, its target, met or not. Ratios are of medians; 'n/a' where a part did not run.
 */
import { summarize } from './lib.js';
import { LEAN_RELAY, LEAN_RELAY_SAME_HEADERS } from './systems/lean-relay.js';
import { type DrainFigures, drainRatio, medianOf } from './workloads/drain-pair.js';
import type { HeldDrainRun, HeldSteadyRun } from './workloads/held-snapshot.js';
import type { LatencyResult } from './workloads/latency.js';
import { latencyKey, latencyMedian } from './workloads/latency-pair.js';
import {
  PGBENCH_BARE,
  PGBENCH_TABLE,
  PGBENCH_TABLE_VERSIONED,
  PGBENCH_WAL,
  type PgbenchRuns,
} from './workloads/pgbench-wal.js';
import type { ProducerRuns, ProducerVariant } from './workloads/producer.js';

export interface TargetRow {
  readonly what: string;
  readonly measured: string;
  readonly target: string;
  /** undefined: not measured. */
  readonly met: boolean | undefined;
}

/** A row of one or more ratios, met when every one is. */
function row(
  what: string,
  values: ReadonlyArray<number | undefined>,
  target: string,
  ok: (v: number, i: number) => boolean,
  /** The figures the ratios are of, shown after them. */
  detail?: string,
): TargetRow {
  const measured = values.map((v) => (v === undefined || !Number.isFinite(v) ? 'n/a' : `${v.toFixed(2)}×`));
  const known = values.every((v) => v !== undefined && Number.isFinite(v));
  return {
    what,
    measured: measured.join(' / ') + (detail ? ` (${detail})` : ''),
    target,
    met: known ? values.every((v, i) => ok(v!, i)) : undefined,
  };
}
const atLeast = (x: number) => (v: number) => v >= x;
const atMost = (x: number) => (v: number) => v <= x;

/** The names W1 and W2 give the systems (bench/targets.ts). */
export const POLLING = 'tx-outbox (polling relay)';
export const CDC_TABLE = 'tx-outbox CDC relay (table mode)';
export const CDC_WAL = 'tx-outbox CDC relay (WAL-mode producers)';

/** The medians of one measure of two systems, `a / b unit`. */
function both(a: DrainFigures, b: DrainFigures, measure: keyof DrainFigures, unit: string): string {
  const f = (x: DrainFigures): string => {
    const m = medianOf(x[measure]);
    return m === undefined
      ? 'n/a'
      : measure === 'rate'
        ? Math.round(m).toLocaleString('en-US')
        : m.toFixed(1);
  };
  return `${f(a)} / ${f(b)} ${unit}`;
}

export function w1Rows(figures: ReadonlyMap<string, DrainFigures>, events: number): TargetRow[] {
  const get = (name: string): DrainFigures =>
    figures.get(name) ?? { rate: [], relay: [], postgres: [], nats: [], rss: [] };
  const txo = get(POLLING);
  const lean = get(LEAN_RELAY);
  const same = get(LEAN_RELAY_SAME_HEADERS);
  const rss = medianOf(txo.rss);
  /** A ratio of the polling relay's (or `ours`) median to `theirs`. */
  const ratioRow = (
    what: string,
    theirs: DrainFigures,
    measure: keyof DrainFigures,
    target: string,
    ok: (v: number) => boolean,
    ours = txo,
  ): TargetRow =>
    row(
      what,
      [drainRatio(ours, theirs, measure)],
      target,
      ok,
      both(ours, theirs, measure, measure === 'rate' ? 'events/s' : 'ms per 1,000 events'),
    );
  return [
    ratioRow('W1 drain vs the lean relay', lean, 'rate', '≥ 0.85×', atLeast(0.85)),
    ratioRow('W1 drain vs the same-headers lean relay', same, 'rate', '≥ 0.95×', atLeast(0.95)),
    ratioRow('PostgreSQL CPU per event vs lean', lean, 'postgres', '≤ 1.5×', atMost(1.5)),
    ratioRow('relay CPU per event vs lean', lean, 'relay', '≤ 1.6×', atMost(1.6)),
    ratioRow('relay CPU per event vs the same-headers lean relay', same, 'relay', '≤ 1.3×', atMost(1.3)),
    ratioRow(
      'CDC relay (table mode) W1 vs polling relay',
      txo,
      'rate',
      '≥ 1.5×',
      atLeast(1.5),
      get(CDC_TABLE),
    ),
    ratioRow(
      'CDC relay (WAL-mode producers) W1 vs polling relay',
      txo,
      'rate',
      '≥ 1.5×',
      atLeast(1.5),
      get(CDC_WAL),
    ),
    {
      what: `relay peak RSS in the ${events.toLocaleString('en-US')}-event drain (median [each run])`,
      measured: rss === undefined ? 'n/a' : `${rss.toFixed(0)} MB [${txo.rss.join(', ')}]`,
      target: '≤ 150 MB',
      met: rss === undefined ? undefined : rss <= 150,
    },
  ];
}

export function w2Rows(
  results: ReadonlyMap<string, LatencyResult[]>,
  mode: string,
  rates: readonly number[],
  cdcRates: readonly number[],
): TargetRow[] {
  const ms = (name: string, rate: number, f: (r: LatencyResult) => number): number =>
    latencyMedian(results, latencyKey(mode, rate, name), f);
  const ratio = (name: string, rate: number, f: (r: LatencyResult) => number): number =>
    ms(name, rate, f) / ms(LEAN_RELAY, rate, f);
  /** `ours / lean ms` of one percentile. */
  const pair = (name: string, rate: number, label: string, f: (r: LatencyResult) => number): string =>
    `${label} ${ms(name, rate, f).toFixed(1)} / ${ms(LEAN_RELAY, rate, f).toFixed(1)} ms`;
  const p50 = (r: LatencyResult) => r.p50;
  const p99 = (r: LatencyResult) => r.p99;
  const at = (rate: number): string => `${rate.toLocaleString('en-US')} tx/s`;
  return [
    ...[...rates]
      .sort((a, b) => b - a)
      .map((rate) =>
        row(
          `W2 p50 / p99 at ${at(rate)} vs lean`,
          [ratio(POLLING, rate, p50), ratio(POLLING, rate, p99)],
          '≤ 1.25×',
          atMost(1.25),
          `${pair(POLLING, rate, 'p50', p50)}; ${pair(POLLING, rate, 'p99', p99)}`,
        ),
      ),
    ...cdcRates.flatMap((rate) =>
      [CDC_TABLE, CDC_WAL].map((name) =>
        row(
          `${name.replace('tx-outbox ', '')} W2 p99 at ${at(rate)} vs lean`,
          [ratio(name, rate, p99)],
          '≤ 1.25×',
          atMost(1.25),
          pair(name, rate, 'p99', p99),
        ),
      ),
    ),
  ];
}

export function w3Rows(producer: ProducerRuns | undefined, pgbench: PgbenchRuns | undefined): TargetRow[] {
  const client = (v: ProducerVariant): number | undefined => {
    const tps = producer?.tps[v] ?? [];
    const bare = producer?.tps['business + bare INSERT'] ?? [];
    return tps.length && bare.length ? summarize(tps).median / summarize(bare).median : undefined;
  };
  const server = (name: string): number | undefined => {
    const tps = pgbench?.find((r) => r.name === name)?.tps ?? [];
    const bare = pgbench?.find((r) => r.name === PGBENCH_BARE)?.tps ?? [];
    return tps.length && bare.length ? summarize(tps).median / summarize(bare).median : undefined;
  };
  const w3 = [
    client('business + enqueue'),
    client('business + enqueue, caller version'),
    client('business + enqueue via WAL'),
  ];
  const pg = [server(PGBENCH_TABLE), server(PGBENCH_TABLE_VERSIONED), server(PGBENCH_WAL)];
  const ok = (v: number, i: number) => v >= [0.7, 0.85, 1.0][i]!;
  const what = 'default / caller versions / WAL mode vs business + bare INSERT';
  const bare = (tps: number[] | undefined): string =>
    tps?.length ? `bare INSERT ${Math.round(summarize(tps).median).toLocaleString('en-US')} TPS` : 'n/a';
  return [
    row(`W3 ${what}`, w3, '≥ 0.70 / ≥ 0.85 / ≥ 1.0', ok, bare(producer?.tps['business + bare INSERT'])),
    row(
      `W3 server side (pgbench) ${what}`,
      pg,
      '≥ 0.70 / ≥ 0.85 / ≥ 1.0',
      ok,
      bare(pgbench?.find((r) => r.name === PGBENCH_BARE)?.tps),
    ),
  ];
}

export function w6Rows(
  steady: readonly HeldSteadyRun[],
  drain: readonly HeldDrainRun[],
  label: string,
): TargetRow[] {
  const [free, held] = [steady.find((r) => !r.held), steady.find((r) => r.held)];
  const rate = (h: boolean): number | undefined => {
    const runs = drain.filter((r) => r.held === h);
    return runs.length ? summarize(runs.map((r) => r.perSecond)).median : undefined;
  };
  const [drainHeld, drainFree] = [rate(true), rate(false)];
  return [
    row(
      `held snapshot, ${label}: claim p99 held / not held`,
      [free && held ? held.claim.p99 / free.claim.p99 : undefined],
      '≤ 1.5×',
      atMost(1.5),
      free && held ? `${held.claim.p99.toFixed(2)} / ${free.claim.p99.toFixed(2)} ms` : undefined,
    ),
    row(
      'held snapshot: W1 drain held / not held',
      [drainHeld !== undefined && drainFree ? drainHeld / drainFree : undefined],
      '≥ 0.95×',
      atLeast(0.95),
      drainHeld !== undefined && drainFree !== undefined
        ? `${Math.round(drainHeld).toLocaleString('en-US')} / ${Math.round(drainFree).toLocaleString('en-US')} events/s`
        : undefined,
    ),
  ];
}

export function markdownTable(rows: readonly TargetRow[]): string[] {
  return [
    '| | measured | target | |',
    '|---|---|---|---|',
    ...rows.map(
      (r) =>
        `| ${r.what} | ${r.measured} | ${r.target} | ${r.met === undefined ? 'n/a' : r.met ? 'met' : 'not met'} |`,
    ),
  ];
}
