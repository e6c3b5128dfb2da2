/** Commit→apply latency overall and during faults, and each fault's recovery time. */
import type { LatencyRow } from './truth.js';

export interface LatencySummary {
  readonly events: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
}

export interface Window {
  readonly startMs: number;
  readonly endMs: number;
}

function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

export function summarize(latencies: number[]): LatencySummary {
  const sorted = latencies.sort((a, b) => a - b);
  return {
    events: sorted.length,
    p50Ms: Math.round(quantile(sorted, 0.5)),
    p99Ms: Math.round(quantile(sorted, 0.99)),
    maxMs: Math.round(sorted[sorted.length - 1] ?? 0),
  };
}

/** Latency of every event, and of those committed while a fault was active. */
export function latencies(
  rows: readonly LatencyRow[],
  windows: readonly Window[],
): {
  overall: LatencySummary;
  duringFaults: LatencySummary;
  outsideFaults: LatencySummary;
} {
  const sorted = [...windows].sort((a, b) => a.startMs - b.startMs);
  const inFault: number[] = [];
  const outside: number[] = [];
  let w = 0;
  // rows are ordered by commit time: one pass with a cursor over the windows
  const active: Window[] = [];
  for (const [c, a] of rows) {
    while (w < sorted.length && sorted[w]!.startMs <= c) active.push(sorted[w++]!);
    for (let i = active.length - 1; i >= 0; i--) if (active[i]!.endMs < c) active.splice(i, 1);
    (active.length > 0 ? inFault : outside).push(a - c);
  }
  return {
    overall: summarize([...inFault, ...outside]),
    duringFaults: summarize(inFault),
    outsideFaults: summarize(outside),
  };
}

/**
 * Recovery time after a fault: from the fault's end until every event committed before that
 * end had been applied (0 when nothing waited for it).
 */
export function recoveryTimes(rows: readonly LatencyRow[], ends: readonly number[]): number[] {
  const prefixMax: number[] = [];
  let max = 0;
  for (const [, a] of rows) {
    max = Math.max(max, a);
    prefixMax.push(max);
  }
  return ends.map((end) => {
    let lo = 0;
    let hi = rows.length - 1;
    let last = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (rows[mid]![0] <= end) {
        last = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return last < 0 ? 0 : Math.max(0, Math.round(prefixMax[last]! - end));
  });
}
