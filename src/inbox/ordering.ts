/**
 * Per-aggregate ordering policies of a consumer, from the event's sequence and the
 * last sequence the consumer applied for that aggregate:
 * - `strict`: apply only the next sequence; an older one is stale, a gap defers the
 *   message (it is redelivered; parked after a limit). The first event seen for an
 *   aggregate starts it, whatever its sequence (a consumer may join late).
 * - `skip-stale`: apply anything newer than the last applied; older is skipped.
 * - `none`: apply everything (dedup by event id still holds).
 */
export const ORDERING_POLICIES = ['strict', 'skip-stale', 'none'] as const;
export type OrderingPolicy = (typeof ORDERING_POLICIES)[number];

export type OrderDecision = 'apply' | 'stale' | 'gap';

export function decideOrder(
  policy: OrderingPolicy,
  last: number | undefined,
  sequence: number,
): OrderDecision {
  if (policy === 'none' || last === undefined) return 'apply';
  if (sequence <= last) return 'stale';
  if (policy === 'strict' && sequence !== last + 1) return 'gap';
  return 'apply';
}
