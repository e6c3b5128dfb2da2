/**
 * Every duration on the command line is a `<duration>`: a whole number with a unit, `500ms`,
 * `5s`, `2m`, `12h` or `7d`. A bare number is milliseconds (what the earlier `<ms>` flags took),
 * except where a slip would delete data: the retention flags of `prune` and `inbox prune`, and
 * `--since`, want the unit (`30` there is refused, not read as 30 ms).
 */
import { InvalidArgumentError } from 'commander';
import { usageError } from './common.js';

const UNITS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/** The longest duration a flag takes: 100 years (what pruning can take). */
export const MAX_DURATION_MS = 36_500 * 86_400_000;

/** What one flag takes. */
export interface DurationRule {
  /** `ms` (default): a bare number is milliseconds; `unit required`: a bare number is refused. */
  readonly bare?: 'ms' | 'unit required';
  /** Shortest accepted, in ms. Default 1. */
  readonly min?: number;
  /** Longest accepted, in ms. Default {@link MAX_DURATION_MS}. */
  readonly max?: number;
}

/** The rule of a flag that arms a timer (a poll interval, a lease): at most 2^31 − 1 ms, as Node.js timers take. */
export const TIMER: DurationRule = { max: 2 ** 31 - 1 };

/** The rule of a retention flag (what is older is deleted): the unit is required. */
export const RETENTION: DurationRule = { bare: 'unit required' };

/** `7d`, `12h`, `30m`, `45s`, `500ms` (and, unless the rule says otherwise, `500`) → ms; else why not. */
function durationMs(value: string, rule: DurationRule): number | string {
  const { bare = 'ms', min = 1, max = MAX_DURATION_MS } = rule;
  const m = /^(\d+)(ms|s|m|h|d)?$/.exec(value.trim());
  const example =
    bare === 'ms' ? 'such as 500ms, 5s, 2m or 12h (a bare number is ms)' : 'such as 7d, 12h or 30m';
  if (!m || (m[2] === undefined && bare !== 'ms')) return `needs a duration ${example}`;
  const ms = Number(m[1]) * UNITS[m[2] ?? 'ms']!;
  if (!(Number.isSafeInteger(ms) && ms >= min && ms <= max)) {
    return `${value} is out of range: give a duration from ${describe(min)} to ${describe(max)}`;
  }
  return ms;
}

/** The duration `value` of `flag` in ms; a usage error (exit 2) naming the flag when it is not one. */
export function parseDuration(flag: string, value: string | undefined, rule: DurationRule = {}): number {
  const ms = durationMs(value ?? '', rule);
  if (typeof ms === 'string') throw usageError(`${flag} ${ms}`);
  return ms;
}

/** A commander parser for a `<duration>` flag: its value in ms. */
export function durationOption(rule: DurationRule = {}): (value: string) => number {
  return (value: string) => {
    const ms = durationMs(value, rule);
    if (typeof ms === 'string') throw new InvalidArgumentError(`It ${ms.replace(/^\S+ is /, 'is ')}.`);
    return ms;
  };
}

/** A whole ms count in the largest unit that divides it: `300ms`, `15s`, `36500d`. */
function describe(ms: number): string {
  for (const unit of ['d', 'h', 'm', 's'] as const) {
    if (ms % UNITS[unit]! === 0) return `${ms / UNITS[unit]!}${unit}`;
  }
  return `${ms}ms`;
}
