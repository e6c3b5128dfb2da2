/**
 * The publisher contract: small enough to fit in a tweet. A publisher receives
 * a batch of messages that belong to DIFFERENT aggregates (the relay's ordering
 * gate sends an aggregate's next event only after its previous one was
 * acknowledged), publishes them concurrently, and returns one outcome per
 * message, in the same order. It never throws for a per-message failure.
 */

import type { OutboxMessage } from '../core/message.js';
import type { PublisherKind } from './kind.js';

export type { OutboxMessage } from '../core/message.js';

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
