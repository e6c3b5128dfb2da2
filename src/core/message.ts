/**
 * One outbox event as the relay hands it to a publisher: the neutral core that both sources
 * (polling and CDC), the envelope bindings and the publishers share. Re-exported by
 * `publishers/contract.ts` and the package root.
 */
export interface OutboxMessage {
  /** Outbox row id (relay order). Internal; not sent to brokers. */
  readonly id: string;
  /** Stable event id (UUID v7): the broker's dedup key / message id. */
  readonly eventId: string;
  readonly aggregateType: string;
  readonly aggregateId: string;
  /** Per-aggregate sequence, gap-free from `sequenceBase + 1`. */
  readonly sequence: number;
  /**
   * Where the aggregate's sequences start: its first event is `sequenceBase + 1`. 0 (or absent)
   * unless the aggregate was created after the pruner ran (docs/schema.md, Bounded tables).
   */
  readonly sequenceBase?: number;
  readonly type: string;
  readonly schemaVersion: number;
  /** Destination chosen by the producer (subject, URL key …), or null for the publisher's default. */
  readonly topic: string | null;
  /** The stored payload bytes, passed through untouched (JSON text or raw bytes). */
  readonly payload: Uint8Array;
  readonly contentType: 'application/json' | 'application/octet-stream';
  /** User headers plus `traceparent`/`tracestate` when the producer had an active span. */
  readonly headers: Readonly<Record<string, string>>;
  readonly createdAt: Date;
  /** The `deliverAfter` it was enqueued with, when it had one: it was not due before. */
  readonly deliverAfter?: Date;
  /** Failed attempts so far (0 on the first try). */
  readonly attempts: number;
}
