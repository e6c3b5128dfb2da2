/**
 * W1 in pairs (bench/pair.ts, bench/targets.ts): several systems drain the same backlog shape,
 * interleaved run by run so that each sees the same machine; per system the figures of every run
 * (events/s, CPU ms per 1,000 events of the relay process, its PostgreSQL backends and
 * nats-server, the relay's peak RSS), their medians, and tx-outbox's ratios to the lean relays.
 */
import type pg from 'pg';
import { summarize } from '../lib.js';
import { LEAN_RELAY, LEAN_RELAY_SAME_HEADERS } from '../systems/lean-relay.js';
import type { DrainSystem } from '../systems/types.js';
import { drainRun } from './drain.js';

export interface DrainContender {
  readonly name: string;
  readonly system: () => DrainSystem;
  /** The relay process script to run (tx-outbox's, of another build), if not this build's. */
  readonly script?: string;
  /** A tx-outbox build: its ratios to the lean relays are printed. */
  readonly txOutbox?: boolean;
}

/** One system's figures, run by run. */
export interface DrainFigures {
  readonly rate: number[];
  readonly relay: number[];
  readonly postgres: number[];
  readonly nats: number[];
  readonly rss: number[];
}

export interface DrainPairOptions {
  readonly events: number;
  readonly aggregates: number;
  readonly runs: number;
  readonly contenders: readonly DrainContender[];
  /** Each run's line as it finishes (default: console.log). */
  readonly log?: (line: string) => void;
}

/** `runs` rounds, each contender once a round in order; the figures by contender name. */
export async function drainPairs(
  pool: pg.Pool,
  options: DrainPairOptions,
): Promise<Map<string, DrainFigures>> {
  const log = options.log ?? console.log;
  const figures = new Map<string, DrainFigures>();
  try {
    for (let i = 0; i < options.runs; i++) {
      for (const c of options.contenders) {
        if (c.script) process.env['TXO_BENCH_RELAY_PROCESS'] = c.script;
        else delete process.env['TXO_BENCH_RELAY_PROCESS'];
        const r = await drainRun(pool, c.system(), {
          events: options.events,
          aggregates: options.aggregates,
          payloadBytes: 300,
          relays: 1,
        });
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
        log(
          `${c.name}: ${Math.round(r.perSecond)} events/s, CPU ${JSON.stringify(r.cpu)}, RSS ${r.peakRssMb} MB` +
            (r.note ? ` (${r.note})` : ''),
        );
      }
    }
  } finally {
    delete process.env['TXO_BENCH_RELAY_PROCESS'];
  }
  return figures;
}

export const medianOf = (values: readonly number[]): number | undefined =>
  values.length === 0 ? undefined : summarize(values).median;

/** a / b of the medians of one measure (undefined where either is missing). */
export function drainRatio(
  a: DrainFigures,
  b: DrainFigures,
  measure: keyof DrainFigures,
): number | undefined {
  const x = medianOf(a[measure]);
  const y = medianOf(b[measure]);
  return x === undefined || y === undefined || y === 0 ? undefined : x / y;
}

const fmt = (n: number | undefined, digits = 1): string => (n === undefined ? 'n/a' : n.toFixed(digits));
const times = (n: number | undefined): string => (n === undefined ? 'n/a' : `${n.toFixed(2)}×`);

/** The summary: medians [each run] per system, then each tx-outbox's ratios to the lean relays. */
export function drainPairReport(
  figures: ReadonlyMap<string, DrainFigures>,
  options: Omit<DrainPairOptions, 'log'>,
): string[] {
  const lines = [
    `${options.events} events over ${options.aggregates} aggregates, ${options.runs} interleaved runs; medians [each run]:`,
  ];
  const each = (values: number[]): string => values.map((v) => v.toFixed(1)).join(', ');
  for (const [name, f] of figures) {
    lines.push(
      `${name}: ${fmt(medianOf(f.rate), 0)} events/s [${f.rate.map(Math.round).join(', ')}]; CPU ms per 1,000 events: ` +
        `relay ${fmt(medianOf(f.relay))} [${each(f.relay)}], ` +
        `PostgreSQL ${fmt(medianOf(f.postgres))} [${each(f.postgres)}], ` +
        `NATS ${fmt(medianOf(f.nats))}; peak RSS ${fmt(medianOf(f.rss), 0)} MB [${f.rss.join(', ')}]`,
    );
  }
  lines.push('', 'Ratios of the medians (drain: higher is better; CPU: lower is better):');
  for (const c of options.contenders.filter((c) => c.txOutbox)) {
    const ours = figures.get(c.name);
    if (!ours) continue;
    for (const lean of [LEAN_RELAY, LEAN_RELAY_SAME_HEADERS]) {
      const theirs = figures.get(lean);
      if (!theirs) continue;
      lines.push(
        `${c.name} / ${lean}: drain ${times(drainRatio(ours, theirs, 'rate'))}, relay CPU ${times(drainRatio(ours, theirs, 'relay'))}, ` +
          `PostgreSQL CPU ${times(drainRatio(ours, theirs, 'postgres'))}, NATS CPU ${times(drainRatio(ours, theirs, 'nats'))}`,
      );
    }
  }
  return lines;
}
