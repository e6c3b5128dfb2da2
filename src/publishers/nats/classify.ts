/**
 * The classification of every way a NATS publish can end (a JetStream API refusal, a client
 * error, no PubAck in time, a lost connection, an abort) into a PublishError naming the
 * subject, so both modes (the pipeline and the official client's `js.publish`) fail with the
 * same errors and codes.
 */
import { BROKER_UNAVAILABLE, errorMessage, isBrokerUnavailable, PublishError } from '../../errors.js';
import { failed, type PublishOutcome } from '../contract.js';
import { abortError } from '../core/abort-error.js';
import type { CallAbort } from '../core/call-abort.js';

/** JetStream API error codes that a retry cannot cure. */
const PERMANENT_API_ERRORS: ReadonlyMap<number, string> = new Map([
  [10060, 'the subject is not captured by the expected stream'],
  [10054, "the message exceeds the stream's max_msg_size"],
]);

/** The server refused the publish with a JetStream API error (`{ error: { err_code … } }`). */
export function apiRefusal(
  subject: string,
  errCode: number | undefined,
  description: string,
  cause?: unknown,
): PublishError {
  const reason = errCode === undefined ? undefined : PERMANENT_API_ERRORS.get(errCode);
  if (reason !== undefined) {
    return new PublishError(`JetStream refused subject "${subject}": ${reason} (${description})`, {
      retryable: false,
      cause,
    });
  }
  return new PublishError(`Publish to "${subject}" failed: ${description}`, { retryable: true, cause });
}

/** 503 no responders: no stream captures the subject, or JetStream is restarting. */
export function noResponders(subject: string, cause?: unknown): PublishError {
  return new PublishError(
    `No JetStream stream answered for subject "${subject}" (503 no responders: stream missing or server restarting)`,
    { retryable: true, code: BROKER_UNAVAILABLE, cause },
  );
}

/**
 * 503 no responders while JetStream answers: no stream captures the subject. The event's (or
 * the configuration's) failure, charged as an attempt: it goes dead after maxAttempts.
 */
export function noStreamCaptures(subject: string, cause?: unknown): PublishError {
  return new PublishError(
    `No JetStream stream captures subject "${subject}" (503 no responders while JetStream answers): ` +
      'add the subject to a stream, or publish it to one that has it',
    { retryable: true, cause },
  );
}

export function timedOut(subject: string, timeoutMs: number, cause?: unknown): PublishError {
  return new PublishError(`Timed out after ${timeoutMs} ms waiting for the PubAck of "${subject}"`, {
    retryable: true,
    cause,
  });
}

/**
 * No PubAck in time, and nothing heard from the server since the publish nor in answer to a
 * ping: the link is in doubt (a stall, a half-open connection), which is the broker being
 * unreachable, not the message failing.
 */
export function linkInDoubt(subject: string, timeoutMs: number, probeMs: number): PublishError {
  return new PublishError(
    `No PubAck for "${subject}" within ${timeoutMs} ms and no answer from NATS to a ping within ` +
      `${probeMs} ms: the connection is in doubt (it is republished; JetStream dedups by Nats-Msg-Id)`,
    { retryable: true, code: BROKER_UNAVAILABLE },
  );
}

export function abortedBeforeAck(subject: string, cause?: unknown): PublishError {
  return new PublishError(`Publish to "${subject}" aborted before its PubAck arrived`, {
    retryable: true,
    cause,
  });
}

export function cancelledBeforeSend(subject: string): PublishError {
  return new PublishError(`Publish to "${subject}" was cancelled before sending`, { retryable: true });
}

/**
 * The connection dropped before the PubAck came. The message may be stored all the same:
 * the relay republishes it and the stream's duplicate window keeps one copy.
 */
export function connectionLost(subject: string, cause?: unknown): PublishError {
  return new PublishError(
    `Publish to "${subject}" lost its PubAck: the connection to NATS dropped (it is republished; ` +
      'JetStream dedups by Nats-Msg-Id)',
    { retryable: true, code: BROKER_UNAVAILABLE, cause },
  );
}

/** Maps a client or server error thrown by the client to a PublishError naming the subject. */
export function classify(error: unknown, subject: string, timeoutMs: number): PublishError {
  const name = errorName(error);
  const detail = errorMessage(error);
  const apiCode = apiErrorCode(error);
  if (apiCode !== undefined) {
    const refusal = apiRefusal(subject, apiCode, detail, error);
    if (!refusal.retryable) return refusal;
  }
  if (name === 'InvalidSubjectError') {
    return new PublishError(`NATS rejects subject "${subject}": ${detail}`, {
      retryable: false,
      cause: error,
    });
  }
  if (name === 'InvalidArgumentError' && detail.includes('max_payload')) {
    return new PublishError(
      `Message for subject "${subject}" exceeds the server's max_payload (with headers)`,
      { retryable: false, cause: error },
    );
  }
  if (name === 'TimeoutError') return timedOut(subject, timeoutMs, error);
  if (isNoResponders(error)) return noResponders(subject, error);
  if (name === 'AbortError') return abortedBeforeAck(subject, error);
  return new PublishError(`Publish to "${subject}" failed: ${detail}`, {
    retryable: true,
    ...(UNAVAILABLE_ERRORS.has(name) || /disconnect|connection (closed|refused)/i.test(detail)
      ? { code: BROKER_UNAVAILABLE }
      : {}),
    cause: error,
  });
}

/**
 * Client errors that say the server cannot be reached: the relay retries them without
 * charging the event an attempt.
 */
const UNAVAILABLE_ERRORS: ReadonlySet<string> = new Set([
  'ConnectionError',
  'ClosedConnectionError',
  'DrainingConnectionError',
]);

/** A retryable failure re-labelled as the broker's fault (the connection dropped meanwhile). */
export function asUnavailable(outcome: PublishOutcome): PublishOutcome {
  if (outcome.ok || !outcome.retryable || isBrokerUnavailable(outcome.error)) return outcome;
  const error = new PublishError(`${outcome.error.message} (the connection to NATS dropped)`, {
    retryable: true,
    code: BROKER_UNAVAILABLE,
    cause: outcome.error,
  });
  return failed(error, true);
}

/** A client error for a 503 no responders reply (no stream for the subject, or no JetStream). */
export function isNoResponders(error: unknown): boolean {
  const name = errorName(error);
  return name === 'JetStreamNotEnabled' || name === 'NoResponders';
}

export function errorName(error: unknown): string {
  return error instanceof Error ? error.name : '';
}

export function apiErrorCode(error: unknown): number | undefined {
  // JetStreamApiError and its subclasses (StreamNotFoundError …) carry the server's err_code.
  if (!(error instanceof Error) || !('apiError' in error)) return undefined;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'number' ? code : undefined;
}

/**
 * What a race against the call's {@link CallAbort} rejected with, the caller's abort reading as
 * an `AbortError` (`Aborted: <reason>`) whatever its reason was: so it classifies as an abort.
 */
export function abortedAs(abort: CallAbort, error: unknown): unknown {
  return abort.cause !== undefined && error === abort.reason ? abortError(error) : error;
}
