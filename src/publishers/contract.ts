/**
 * The publisher contract: small enough to fit in a tweet. A publisher receives
 * a batch of messages that belong to DIFFERENT aggregates (the relay's ordering
 * gate sends an aggregate's next event only after its previous one was
 * acknowledged), publishes them concurrently, and returns one outcome per
 * message, in the same order. It never throws for a per-message failure.
 */

import type { PublisherKind } from '../metrics/broker.js';

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

export type PublishOutcome =
  | { readonly ok: true }
  | {
      readonly ok: false;
      readonly retryable: boolean;
      readonly error: Error;
      readonly retryAfterMs?: number;
    };

export interface Publisher {
  /** Short name for logs and metrics, e.g. `nats` or `webhook`. */
  readonly name: string;
  /**
   * The `broker` label of the publish metrics: `nats`, `kafka`, `rabbitmq`, `redis`, `mqtt`,
   * `webhook`, `router` or `custom`. Optional: without it the name is used when it is one of
   * those, else `custom`.
   */
  readonly kind?: PublisherKind;
  publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]>;
  close(): Promise<void>;
}

export const DELIVERED: PublishOutcome = Object.freeze({ ok: true });

export function failed(error: Error, retryable: boolean, retryAfterMs?: number): PublishOutcome {
  return retryAfterMs === undefined
    ? { ok: false, retryable, error }
    : { ok: false, retryable, error, retryAfterMs };
}
