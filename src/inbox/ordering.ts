/**
 * Per-aggregate ordering policies of a consumer, from the event's sequence and the
 * last sequence the consumer applied for that aggregate:
 * - `strict`: apply only the next sequence; an older one is stale, a gap defers the
 *   message (it is redelivered; parked after a limit). An aggregate this consumer has not
 *   seen starts at `start` (1: tx-outbox sequences start there), or with whatever sequence
 *   comes first when `start` is `'first-seen'` (a consumer that joins an existing stream).
 *   The next sequence is `max(last, base) + 1`, `base` the event's sequence base: an aggregate
 *   whose producer-side row was pruned starts again above every sequence it had (docs/schema.md,
 *   Bounded tables), and its first event is `base + 1`.
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
  base = 0,
): OrderDecision {
  if (policy === 'none') return 'apply';
  if (last === undefined) {
    if (policy !== 'strict' || start === 'first-seen') return 'apply';
    return decideOrder(policy, start - 1, sequence, 1, base);
  }
  if (sequence <= last) return 'stale';
  if (policy === 'strict' && sequence !== expectedSequence(last, base)) return 'gap';
  return 'apply';
}

/** The sequence `strict` applies next after `last` for an event of sequence base `base`. */
export function expectedSequence(last: number, base = 0): number {
  return Math.max(last, base) + 1;
}

/**
 * How long a `strict` gap may stay unfilled. The clock is the waiting observed since the aggregate
 * last advanced, as its deferred successor sees it: the intervals between its consecutive
 * deferrals, each counted for at most {@link GAP_INTERVAL_CAP_MS}, so time the consumer, broker or
 * database was down between two deliveries does not count. It starts at the first deferral and
 * restarts whenever the aggregate's position has moved since (the gap shrank, so the stream is
 * alive). An ordinary fault holds a predecessor back for a bounded time — a crashed consumer's
 * in-flight message until the broker's ack wait runs out (NATS: 30 s), a broker or database
 * restart for as long as it takes — and the default outlasts several of those in a row. A
 * sequence that never comes (a real hole) keeps its successor redelivered, every `deferCapMs` at
 * most, so its waiting grows at about real time: it exhausts the budget and is quarantined.
 */
export interface GapBudget {
  /** Time without the aggregate advancing, in ms. Default {@link DEFAULT_MAX_GAP_MS}. */
  readonly maxGapMs: number;
  /** Deprecated: deliveries without the aggregate advancing (unlimited unless set). */
  readonly maxDeferrals?: number | undefined;
}

/** Five minutes: ten 30-second ack waits, or a few crashes and a database restart. */
export const DEFAULT_MAX_GAP_MS = 300_000;

/**
 * The most one interval between two deferrals of an event adds to its waiting: a minute, above
 * every adapter's default redelivery interval (`deferCapMs` 10 s, Redis `claimIdleMs` 30 s, the
 * NATS ack wait 30 s), so a real hole's waiting accrues at real time. A longer interval is an
 * outage (or a sender retrying less often than once a minute: its hole takes longer to park).
 */
export const GAP_INTERVAL_CAP_MS = 60_000;

/** What waiting on a gap has cost since the aggregate last advanced. */
export interface GapWait {
  readonly waitedMs: number;
  /** Deliveries of this event since then, this one included. */
  readonly deliveries: number;
}

/** How the reason of an event quarantined for a gap starts. */
export const GAP_NOT_FILLED = 'gap not filled';

/** Why a gap's budget is exhausted (the start of the quarantine reason), or undefined while it is not. */
export function gapExhausted(budget: GapBudget, wait: GapWait): string | undefined {
  if (wait.waitedMs >= budget.maxGapMs) {
    const seconds =
      wait.waitedMs < 10_000 ? (wait.waitedMs / 1000).toFixed(1) : Math.round(wait.waitedMs / 1000);
    return `${GAP_NOT_FILLED} for ${seconds} s (${wait.deliveries} deliveries) without the aggregate advancing`;
  }
  if (budget.maxDeferrals !== undefined && wait.deliveries >= budget.maxDeferrals) {
    return `${GAP_NOT_FILLED} after ${wait.deliveries} deliveries without the aggregate advancing`;
  }
  return undefined;
}
