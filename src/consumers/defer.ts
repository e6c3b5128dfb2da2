/**
 * When a deferred delivery comes back. The first redelivery waits `deferMs`; each further
 * deferral of the same delivery doubles it, up to `deferCapMs`. The inbox's count restarts when
 * the aggregate advances (a gap) so an event that just became next is retried quickly, while a
 * long gap costs few round trips (an ack wait of 30 s at the defaults: 5 deliveries, not 30).
 */
export interface DeferPolicy {
  /** Delay of the first redelivery, in ms. */
  readonly deferMs: number;
  /** Upper bound of any redelivery delay, in ms (at least `deferMs`). */
  readonly deferCapMs: number;
}

export const DEFAULT_DEFER_MS = 1000;
export const DEFAULT_DEFER_CAP_MS = 10_000;

/** The adapter's policy from its options (defaults: 1 s, doubling, capped at 10 s). */
export function deferPolicy(o: { readonly deferMs?: number; readonly deferCapMs?: number }): DeferPolicy {
  const deferMs = o.deferMs ?? DEFAULT_DEFER_MS;
  return { deferMs, deferCapMs: Math.max(deferMs, o.deferCapMs ?? DEFAULT_DEFER_CAP_MS) };
}

/** The delay before the next delivery after the `deferrals`-th deferral in a row (from 1; unknown: 1). */
export function deferDelay(policy: DeferPolicy, deferrals: number | undefined): number {
  const exponent = Math.min(Math.max((deferrals ?? 1) - 1, 0), 30);
  return Math.min(policy.deferCapMs, policy.deferMs * 2 ** exponent);
}
