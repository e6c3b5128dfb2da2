import { errorMessage } from '../errors.js';
import type { Logger } from '../logger.js';
import type { FailureReason } from '../metrics/relay-metrics.js';
import type { OutboxMessage, PublishOutcome } from '../publishers/contract.js';
import { redactText } from '../redact.js';
import { type BackoffPolicy, fullJitterDelay } from './backoff.js';
import type { SourceBatch } from './batch.js';

/** A failed publish, as the outcome statement records it on the event. */
export interface Failure {
  readonly id: string;
  readonly status: 'pending' | 'dead';
  /** Until the next attempt, ms (0 for a dead event). */
  readonly delayMs: number;
  /** `last_error`: redacted, at most {@link MAX_ERROR_CHARS}, `permanent: ` first for a permanent error. */
  readonly error: string;
  /** Why (the `reason` label of the retried / dead counters). */
  readonly reason: FailureReason;
}

/** What became of a claimed batch's events once published; nothing recorded yet. */
export interface Verdict {
  readonly claimed: SourceBatch;
  /** Ids of the events the broker acknowledged. */
  readonly delivered: string[];
  readonly failures: Failure[];
  /** Publishes refused because the broker was unreachable: those events stay as they were. */
  readonly unavailable: number;
  /** Aggregates with an event refused as unavailable. */
  readonly refused: ReadonlySet<string>;
}

export type FailedOutcome = Extract<PublishOutcome, { ok: false }>;

/** What {@link judge} needs from the relay's options. */
export interface JudgePolicy {
  readonly maxAttempts: number;
  readonly backoff: BackoffPolicy;
  readonly random: () => number;
  readonly logger: Logger;
  readonly relayId: string;
}

/** The longest `last_error` kept. */
export const MAX_ERROR_CHARS = 4000;

/**
 * The verdict on a failed attempt (one the broker refused for the event's own sake, not an
 * unreachable broker): dead when the error is permanent or the attempts are used up, else
 * retried after full-jitter backoff, or after the publisher's `retryAfterMs` when that is
 * longer (both capped by the backoff cap). Logs the verdict.
 */
export function judge(message: OutboxMessage, outcome: FailedOutcome, policy: JudgePolicy): Failure {
  const attempt = message.attempts + 1;
  const dead = !outcome.retryable || attempt >= policy.maxAttempts;
  const reason = outcome.retryable ? '' : 'permanent: ';
  // A safety net under every publisher: no URL's password or query token goes into
  // last_error (nor the log line below), whatever a client library put in its message.
  const error = redactText(`${reason}${errorMessage(outcome.error)}`).slice(0, MAX_ERROR_CHARS);
  if (dead) {
    policy.logger.error(
      { relayId: policy.relayId, eventId: message.eventId, attempts: attempt, error },
      'event is dead; it blocks its aggregate until replayed',
    );
    return {
      id: message.id,
      status: 'dead',
      delayMs: 0,
      error,
      reason: outcome.retryable ? 'max_attempts' : 'permanent',
    };
  }
  const jitter = fullJitterDelay(policy.backoff, attempt, policy.random);
  const delayMs = Math.min(policy.backoff.capMs, Math.max(jitter, outcome.retryAfterMs ?? 0));
  policy.logger.warn(
    { relayId: policy.relayId, eventId: message.eventId, attempts: attempt, retryInMs: delayMs, error },
    'publish failed; will retry',
  );
  return { id: message.id, status: 'pending', delayMs, error, reason: retriedReason(outcome) };
}

/** `publisher_error` when the publisher's call threw (every message of it failed), `throttled` when the broker asked for a delay. */
function retriedReason(outcome: FailedOutcome): FailureReason {
  if ((outcome.error as { code?: unknown }).code === PUBLISHER_FAILED) return 'publisher_error';
  return outcome.retryAfterMs === undefined ? 'retryable' : 'throttled';
}

/** Code of the error a failed publish call (it threw, or broke the contract) gives each of its messages. */
export const PUBLISHER_FAILED = 'TXO_PUBLISHER_FAILED';
