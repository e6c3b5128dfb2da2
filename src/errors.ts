/**
 * Typed errors. Every error tx-outbox raises on purpose is an OutboxError (or,
 * for bad input, an OutboxValidationError, which is a TypeError) so callers can
 * branch on `retryable` and `code` instead of parsing messages.
 */
import pg from 'pg';
import { DATABASE_RETRY_CODES } from './network-errors.js';

export class OutboxError extends Error {
  readonly code: string;
  readonly retryable: boolean;

  constructor(message: string, options: { code: string; retryable?: boolean; cause?: unknown }) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'OutboxError';
    this.code = options.code;
    this.retryable = options.retryable ?? false;
  }
}

/** Bad input: names the offending field and says how to fix it. Nothing was written. */
export class OutboxValidationError extends TypeError {
  readonly code = 'TXO_INVALID_INPUT';
  readonly retryable = false;
  readonly field: string;

  constructor(field: string, problem: string, fix: string) {
    super(`${field}: ${problem}. ${fix}`);
    this.name = 'OutboxValidationError';
    this.field = field;
  }
}

/** A publisher's verdict on one message; `retryAfterMs` is a broker's hint (HTTP Retry-After). */
export class PublishError extends OutboxError {
  readonly retryAfterMs: number | undefined;

  constructor(
    message: string,
    options: { retryable: boolean; code?: string; cause?: unknown; retryAfterMs?: number },
  ) {
    super(message, {
      code: options.code ?? (options.retryable ? 'TXO_PUBLISH_RETRYABLE' : 'TXO_PUBLISH_PERMANENT'),
      retryable: options.retryable,
      cause: options.cause,
    });
    this.name = 'PublishError';
    this.retryAfterMs = options.retryAfterMs;
  }
}

/**
 * Code of a publish failure caused by the broker (or endpoint) being unreachable,
 * not by the message: the relay retries it without charging the event an attempt.
 */
export const BROKER_UNAVAILABLE = 'TXO_BROKER_UNAVAILABLE';

export function brokerUnavailable(message: string, cause?: unknown): PublishError {
  return new PublishError(message, { retryable: true, code: BROKER_UNAVAILABLE, cause });
}

export function isBrokerUnavailable(error: unknown): boolean {
  return error instanceof Error && (error as { code?: unknown }).code === BROKER_UNAVAILABLE;
}

const RETRYABLE_PG_CODES = new Set([
  '40001', // serialization_failure
  '40P01', // deadlock_detected
  '57P01', // admin_shutdown
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now
  '53300', // too_many_connections
  '08000',
  '08003',
  '08006',
  '08001',
  '08004',
]);

/** True for PostgreSQL and network errors that a retry may cure (lost connection, deadlock, restart). */
export function isRetryableDatabaseError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && (RETRYABLE_PG_CODES.has(code) || DATABASE_RETRY_CODES.has(code))) {
    return true;
  }
  const message = error.message;
  return (
    message.includes('Connection terminated') ||
    message.includes('connection timeout') ||
    message.includes('Client has encountered a connection error') ||
    message.includes('terminating connection')
  );
}

/** serialization_failure, deadlock_detected: a transaction that lost a race (retry it). */
export const CONFLICT_PG_CODES: ReadonlySet<string> = new Set(['40001', '40P01']);

/**
 * True for PostgreSQL's serialization failure or deadlock (SQLSTATE 40001, 40P01) as the pg driver
 * reports a server error: its DatabaseError (or one of that shape, from another copy of pg). The
 * transaction lost a race; a retry may pass. A Node error code (ECONNREFUSED …) is not one.
 */
export function isTransactionConflict(error: unknown): boolean {
  return isPgServerError(error) && CONFLICT_PG_CODES.has(error.code);
}

/**
 * True for an error the PostgreSQL server sent, as the pg driver reports it: its DatabaseError (or
 * one of that shape, from another copy of pg), with its SQLSTATE in `code`.
 */
export function isPgServerError(error: unknown): error is Error & { code: string } {
  if (!(error instanceof Error)) return false;
  const e = error as { code?: unknown; severity?: unknown; routine?: unknown };
  if (typeof e.code !== 'string') return false;
  return (
    error instanceof pg.DatabaseError ||
    (error.name === 'error' && typeof e.severity === 'string' && 'routine' in error)
  );
}

export function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message;
  return String(error);
}

/**
 * `enqueue` refused to write: the outbox backlog has reached the `maxPending` ceiling the
 * caller set (relays are not keeping up, or none runs). Thrown before anything is written; the
 * caller's transaction is still usable (roll back, or commit the rest of its work). Retryable:
 * the backlog drains.
 */
export class OutboxBackpressureError extends OutboxError {
  /** The backlog measured (pending events, an estimate), see `pendingFrom`. */
  readonly pending: number;
  /** The `maxPending` ceiling passed to `enqueue`. */
  readonly ceiling: number;
  /**
   * `relay`: the figure the relays published within their last three intervals; `estimate`: no
   * fresh figure (no relay running), PostgreSQL's live-row count of the events table.
   */
  readonly pendingFrom: 'relay' | 'estimate';

  constructor(schema: string, pending: number, ceiling: number, pendingFrom: 'relay' | 'estimate') {
    super(
      `outbox "${schema}" holds about ${pending} pending events, at or over maxPending (${ceiling}): ` +
        'not enqueued. Retry later, or check that relays run and keep up (tx-outbox status).',
      { code: 'TXO_BACKPRESSURE', retryable: true },
    );
    this.name = 'OutboxBackpressureError';
    this.pending = pending;
    this.ceiling = ceiling;
    this.pendingFrom = pendingFrom;
  }

  /** @deprecated Use `pendingFrom` (`source` is the relay's source, or the CloudEvents attribute). */
  get source(): 'relay' | 'estimate' {
    if (!warnedBackpressureSource) {
      warnedBackpressureSource = true;
      process.emitWarning(
        'OutboxBackpressureError: property `source` is deprecated, use `pendingFrom` (the old spelling goes in the next minor version)',
        { type: 'DeprecationWarning', code: 'TXO_DEPRECATED_OPTION' },
      );
    }
    return this.pendingFrom;
  }
}

let warnedBackpressureSource = false;

/**
 * A transaction that a failed statement aborted, whose error the caller's code caught and went on:
 * PostgreSQL answers its COMMIT with a ROLLBACK and no error, so nothing was committed.
 */
export function abortedTransaction(): OutboxError {
  return new OutboxError(
    'the transaction was aborted by a failed statement whose error was caught: nothing was committed ' +
      '(to go on after a failed statement, roll back to a savepoint)',
    { code: 'TXO_TRANSACTION_ABORTED' },
  );
}
