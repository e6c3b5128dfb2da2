/** The seeded fault schedule: what happens when, to whom; printed at start so a seed reproduces it. */

import { between, pick, type Random, shuffle } from './prng.js';
import type { Profile } from './profiles.js';

export const FAULT_KINDS = [
  'kill',
  'stop',
  'pg-restart-fast',
  'pg-restart-immediate',
  'broker-restart',
  'tcp-reset',
  'tcp-stall',
  'tcp-latency',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface Fault {
  readonly index: number;
  /** Seconds after the fault phase started. */
  readonly atS: number;
  readonly kind: FaultKind;
  /** A component (kill, stop), a proxy link (tcp-*), or the server (pg-*, broker-restart). */
  readonly target: string;
  readonly durationS?: number;
  readonly latencyMs?: number;
}

/** Relative frequency of each kind after every kind appeared once. */
const WEIGHTS: Readonly<Record<FaultKind, number>> = {
  kill: 4,
  stop: 3,
  'pg-restart-fast': 1,
  'pg-restart-immediate': 1,
  'broker-restart': 1.5,
  'tcp-reset': 2,
  'tcp-stall': 2,
  'tcp-latency': 1.5,
};

function weightedKind(random: Random): FaultKind {
  const total = FAULT_KINDS.reduce((sum, k) => sum + WEIGHTS[k], 0);
  let r = random() * total;
  for (const kind of FAULT_KINDS) {
    r -= WEIGHTS[kind];
    if (r < 0) return kind;
  }
  return 'kill';
}

export function faultSchedule(
  random: Random,
  profile: Profile,
  components: readonly string[],
  links: readonly string[],
): Fault[] {
  const kinds = shuffle(random, FAULT_KINDS);
  while (kinds.length < profile.faults) kinds.push(weightedKind(random));
  const slot = profile.faultPhaseSeconds / profile.faults;
  return kinds.slice(0, profile.faults).map((kind, index) => {
    const atS = Math.round((index * slot + random() * slot * 0.6) * 10) / 10;
    const base = { index, atS, kind };
    switch (kind) {
      case 'kill':
        return { ...base, target: pick(random, components) };
      case 'stop':
        return {
          ...base,
          target: pick(random, components),
          durationS: between(random, 1, profile.maxStopSeconds, 0.5),
        };
      case 'tcp-reset':
        return { ...base, target: pick(random, links) };
      case 'tcp-stall':
        return {
          ...base,
          target: pick(random, links),
          durationS: between(random, 1, profile.maxStallSeconds, 0.5),
        };
      case 'tcp-latency':
        return {
          ...base,
          target: pick(random, links),
          durationS: between(random, 2, profile.maxLatencySeconds, 0.5),
          latencyMs: between(random, 20, 300, 10),
        };
      case 'broker-restart':
        return { ...base, target: 'broker' };
      default:
        return { ...base, target: 'postgres' };
    }
  });
}

export function describeFault(f: Fault): string {
  const extra = [
    f.durationS !== undefined ? `${f.durationS}s` : '',
    f.latencyMs !== undefined ? `+${f.latencyMs}ms` : '',
  ]
    .filter(Boolean)
    .join(' ');
  return `#${String(f.index).padStart(3, '0')} t+${f.atS.toFixed(1).padStart(6)}s ${f.kind.padEnd(20)} ${f.target}${extra ? ` ${extra}` : ''}`;
}
