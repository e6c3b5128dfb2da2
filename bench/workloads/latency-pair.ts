/**
 * W2 in pairs (bench/latency-pair.ts, bench/targets.ts): several systems at each offered rate,
 * interleaved (system by system within each round), so that every system sees the same machine;
 * per system, rate and mode the results of every run, their medians and tx-outbox's p50 and p99
 * ratios to the lean relays.
 */
import type pg from 'pg';
import { summarize } from '../lib.js';
import { LEAN_RELAY, LEAN_RELAY_SAME_HEADERS } from '../systems/lean-relay.js';
import { type LatencyPlacement, type LatencyResult, type LatencySystem, latencyRun } from './latency.js';

export interface LatencyContender {
  readonly name: string;
  readonly system: () => LatencySystem;
  /** Only at these offered rates (default: every rate of the run). */
  readonly rates?: readonly number[];
  /** A tx-outbox relay: its ratios to the lean relays are printed. */
  readonly txOutbox?: boolean;
}

/** Where W2's ends run and how the producers are paced (bench/workloads/latency.ts). */
export interface LatencyMode {
  readonly name: string;
  readonly placement: LatencyPlacement;
  readonly pacing: 'loose' | 'steady';
}

/** `placement/pacing,…` (e.g. `separate/steady,harness/loose`) as modes. */
export function parseModes(text: string): LatencyMode[] {
  return text.split(',').map((m) => {
    const [placement, pacing] = m.split('/');
    return {
      name: m,
      placement: placement === 'harness' ? 'harness' : 'separate',
      pacing: pacing === 'loose' ? 'loose' : 'steady',
    };
  });
}

export interface LatencyPairOptions {
  readonly rates: readonly number[];
  readonly seconds: number;
  readonly runs: number;
  readonly modes: readonly LatencyMode[];
  readonly contenders: readonly LatencyContender[];
  /** Each run's line as it finishes (default: console.log). */
  readonly log?: (line: string) => void;
}

export const latencyKey = (mode: string, rate: number, name: string): string =>
  `${mode} | ${rate} tx/s | ${name}`;

/** `runs` rounds of every rate, mode and contender; the results by `latencyKey`. */
export async function latencyPairs(
  pool: pg.Pool,
  options: LatencyPairOptions,
): Promise<Map<string, LatencyResult[]>> {
  const log = options.log ?? console.log;
  const results = new Map<string, LatencyResult[]>();
  for (let i = 0; i < options.runs; i++) {
    for (const rate of options.rates) {
      for (const mode of options.modes) {
        for (const c of options.contenders) {
          if (c.rates && !c.rates.includes(rate)) continue;
          const r = await latencyRun(pool, {
            rate,
            seconds: options.seconds,
            system: c.system(),
            placement: mode.placement,
            pacing: mode.pacing,
          });
          const k = latencyKey(mode.name, rate, c.name);
          results.set(k, [...(results.get(k) ?? []), r]);
          log(
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
  return results;
}

const median = (values: number[]): number => summarize(values).median;

/** The median of one measure over the runs of a key (NaN where there are none). */
export function latencyMedian(
  results: ReadonlyMap<string, LatencyResult[]>,
  key: string,
  f: (r: LatencyResult) => number,
): number {
  const rs = results.get(key);
  return rs && rs.length > 0 ? median(rs.map(f)) : Number.NaN;
}

/** The summary: medians [each run] per key, then each tx-outbox's p50 and p99 ratios to the lean relays. */
export function latencyPairReport(
  results: ReadonlyMap<string, LatencyResult[]>,
  options: Omit<LatencyPairOptions, 'log'>,
): string[] {
  const all = (rs: LatencyResult[], f: (r: LatencyResult) => number): string =>
    `${median(rs.map(f)).toFixed(2)} [${rs.map((r) => f(r).toFixed(1)).join(', ')}]`;
  const lines = [`${options.seconds} s a run, ${options.runs} interleaved rounds; medians [each run], ms:`];
  for (const [k, rs] of results) {
    lines.push(
      `${k}: p50 ${all(rs, (r) => r.p50)}, p95 ${all(rs, (r) => r.p95)}, p99 ${all(rs, (r) => r.p99)}, ` +
        `max ${all(rs, (r) => r.max)}; starts late p99 ${all(rs, (r) => r.lateness.p99)}; loop delay p99 ` +
        `producers ${all(rs, (r) => r.loopDelayP99.producers)}, consumer ${all(rs, (r) => r.loopDelayP99.consumer)}`,
    );
  }
  lines.push('', 'Ratios of the medians, tx-outbox / lean relay:');
  for (const { name: mode } of options.modes) {
    for (const rate of options.rates) {
      for (const c of options.contenders.filter((c) => c.txOutbox)) {
        const ours = latencyKey(mode, rate, c.name);
        if (!results.has(ours)) continue;
        for (const lean of [LEAN_RELAY, LEAN_RELAY_SAME_HEADERS]) {
          const theirs = latencyKey(mode, rate, lean);
          if (!results.has(theirs)) continue;
          const ratio = (f: (r: LatencyResult) => number): string =>
            `${(latencyMedian(results, ours, f) / latencyMedian(results, theirs, f)).toFixed(2)}×`;
          lines.push(
            `${mode} | ${rate} tx/s | ${c.name} / ${lean}: p50 ${ratio((r) => r.p50)}, p99 ${ratio((r) => r.p99)}`,
          );
        }
      }
    }
  }
  return lines;
}
