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
