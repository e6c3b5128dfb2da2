/** The seeded fault schedule: what happens when, to whom; printed at start so a seed reproduces it. */

import { between, pick, type Random, shuffle } from './prng.js';
import type { Profile } from './profiles.js';

/** The faults of every run (the polling relay's whole schedule). */
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

/**
 * The faults added for the CDC relay: the streaming relay killed -9 and held down until a standby
 * streams (`takeover`); the streamer's replication connection stalled half-open (`repl-stall`:
 * sockets open, nothing forwarded, the first one longer than the relay's silence timeout) or
 * reset (`repl-reset`); producers paused while the heartbeat alone must move the slot (`quiet`).
 */
export const CDC_FAULT_KINDS = ['takeover', 'repl-stall', 'repl-reset', 'quiet'] as const;

export const ALL_FAULT_KINDS = [...FAULT_KINDS, ...CDC_FAULT_KINDS] as const;
export type FaultKind = (typeof ALL_FAULT_KINDS)[number];

export type RelayKind = 'poll' | 'cdc';

/** The CDC relay's default silence timeout (cdc/options.ts): a longer stall trips its watchdog. */
export const CDC_SILENCE_TIMEOUT_S = 30;
/** The CDC relay's default heartbeat interval: a quiet period lasts a few of them. */
export const CDC_HEARTBEAT_S = 10;
export const QUIET_SECONDS = 2.5 * CDC_HEARTBEAT_S;

export interface Fault {
  readonly index: number;
  /** Seconds after the fault phase started (a quiet period shifts everything after it). */
  readonly atS: number;
  readonly kind: FaultKind;
  /**
   * A component (kill, stop), a proxy link (tcp-*), the server (pg-*, broker-restart), or
   * `streamer` / `streamer>repl` (resolved when applied: the relay streaming then), `producers`.
   */
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
  takeover: 1.5,
  'repl-stall': 1.2,
  'repl-reset': 1.5,
  quiet: 0.4,
};

function weightedKind(random: Random, kinds: readonly FaultKind[]): FaultKind {
  const total = kinds.reduce((sum, k) => sum + WEIGHTS[k], 0);
  let r = random() * total;
  for (const kind of kinds) {
    r -= WEIGHTS[kind];
    if (r < 0) return kind;
  }
  return 'kill';
}

/**
 * The schedule. For the polling relay it draws exactly what it always drew (a seed of an
 * earlier run gives the same schedule); the CDC relay's draws the CDC kinds besides.
 */
export function faultSchedule(
  random: Random,
  profile: Profile,
  components: readonly string[],
  links: readonly string[],
  relay: RelayKind = 'poll',
): Fault[] {
  const pool: readonly FaultKind[] = relay === 'cdc' ? ALL_FAULT_KINDS : FAULT_KINDS;
  // The CDC relay's run opens with a quiet period (the relays streaming, nothing broken yet) and
  // a long replication stall, so that even the short profile checks the heartbeat and the
  // watchdog, and the stall ends well before the fault phase does.
  const kinds: FaultKind[] =
    relay === 'cdc'
      ? [
          'quiet',
          'repl-stall',
          ...shuffle(
            random,
            pool.filter((k) => k !== 'quiet' && k !== 'repl-stall'),
          ),
        ]
      : shuffle(random, pool);
  while (kinds.length < profile.faults) kinds.push(weightedKind(random, pool));
  const phaseSeconds = relay === 'cdc' ? profile.cdcFaultPhaseSeconds : profile.faultPhaseSeconds;
  const slot = phaseSeconds / profile.faults;
  let replStalls = 0;
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
      case 'takeover':
        return { ...base, target: 'streamer' };
      case 'repl-reset':
        return { ...base, target: 'streamer>repl' };
      case 'repl-stall': {
        // The first outlasts the silence timeout (the watchdog must find the dead connection);
        // the others are drawn short or long.
        const long = replStalls++ === 0 || random() < 0.5;
        return {
          ...base,
          target: 'streamer>repl',
          durationS: long
            ? between(random, CDC_SILENCE_TIMEOUT_S + 2, CDC_SILENCE_TIMEOUT_S + 10, 0.5)
            : between(random, 1, profile.maxStallSeconds, 0.5),
        };
      }
      case 'quiet':
        return { ...base, target: 'producers', durationS: QUIET_SECONDS };
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
