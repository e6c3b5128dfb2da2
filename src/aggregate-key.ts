/** What names an aggregate: its type and its id (an outbox event, an inbox message). */
export interface AggregateRef {
  readonly aggregateType: string;
  readonly aggregateId: string;
}

/**
 * The one key of an aggregate: type and id joined by U+001F (unit separator). The relay's
 * claim statement builds the same key in SQL (`aggregate_type || chr(31) || aggregate_id`)
 * to leave held-back aggregates out, so the two must not drift apart.
 */
export function aggregateKeyOf(aggregateType: string, aggregateId: string): string {
  return `${aggregateType}\u001f${aggregateId}`;
}

/** {@link aggregateKeyOf} an event or a message. */
export function aggregateKey(ref: AggregateRef): string {
  return aggregateKeyOf(ref.aggregateType, ref.aggregateId);
}
