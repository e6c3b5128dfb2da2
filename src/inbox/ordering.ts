/**
 * Per-aggregate ordering policies of a consumer, from the event's sequence and the
 * last sequence the consumer applied for that aggregate:
 * - `strict`: apply only the next sequence; an older one is stale, a gap defers the
 *   message (it is redelivered; parked after a limit). An aggregate this consumer has not
 *   seen starts at `start` (1: tx-outbox sequences start there), or with whatever sequence
 *   comes first when `start` is `'first-seen'` (a consumer that joins an existing stream).
 * - `skip-stale`: apply anything newer than the last applied; older is skipped.
 * - `none`: apply everything (dedup by event id still holds).
 */
export const ORDERING_POLICIES = ['strict', 'skip-stale', 'none'] as const;
export type OrderingPolicy = (typeof ORDERING_POLICIES)[number];

export type OrderDecision = 'apply' | 'stale' | 'gap';

/** Where `strict` starts an aggregate the consumer has not seen. */
export type StartSequence = number | 'first-seen';

export function decideOrder(
  policy: OrderingPolicy,
  last: number | undefined,
  sequence: number,
  start: StartSequence = 1,
): OrderDecision {
  if (policy === 'none') return 'apply';
  if (last === undefined) {
    if (policy !== 'strict' || start === 'first-seen') return 'apply';
    return decideOrder(policy, start - 1, sequence);
  }
  if (sequence <= last) return 'stale';
  if (policy === 'strict' && sequence !== last + 1) return 'gap';
  return 'apply';
}
