export interface BackoffPolicy {
  /** Delay scale of the first retry, in ms. */
  readonly baseMs: number;
  /** Upper bound of any delay, in ms. */
  readonly capMs: number;
}

/**
 * Exponential backoff with full jitter: a uniform draw from
 * [0, min(cap, base * 2^(failures-1))]. `failures` counts from 1.
 */
export function fullJitterDelay(
  policy: BackoffPolicy,
  failures: number,
  random: () => number = Math.random,
): number {
  const exponent = Math.min(Math.max(failures - 1, 0), 52);
  const ceiling = Math.min(policy.capMs, policy.baseMs * 2 ** exponent);
  return Math.floor(random() * ceiling);
}

const LOOP_ERROR_BACKOFF: BackoffPolicy = Object.freeze({ baseMs: 200, capMs: 10_000 });
const OUTAGE_BACKOFF: BackoffPolicy = Object.freeze({ baseMs: 200, capMs: 5000 });

/** The relay's wait after its loop threw (database or publisher), the `failures`-th time in a row. */
export function loopErrorDelay(failures: number, random: () => number): number {
  return 100 + fullJitterDelay(LOOP_ERROR_BACKOFF, failures, random);
}

/**
 * How long aggregates refused as unavailable stay out of claims (and, when nothing got
 * through, the relay waits), after the `refusedBatches`-th refused batch of an outage.
 */
export function outageDelay(refusedBatches: number, random: () => number): number {
  return fullJitterDelay(OUTAGE_BACKOFF, refusedBatches, random) + 50;
}
