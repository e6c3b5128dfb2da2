/**
 * What both NATS publish paths (the lean pipeline and the official client's `js.publish`)
 * share: subject rules, header building, and the classification of every way a publish
 * can end into a {@link PublishOutcome}, so both modes fail with the same errors and codes.
 */
import { type MsgHdrs, headers as natsHeaders } from '@nats-io/transport-node';
import { BROKER_UNAVAILABLE, errorMessage, isBrokerUnavailable, PublishError } from '../errors.js';
import { failed, type OutboxMessage, type PublishOutcome } from './contract.js';
import { defaultDestination } from './core/destination.js';
import { permanent } from './core/outcomes.js';

/** JetStream API error codes that a retry cannot cure. */
const PERMANENT_API_ERRORS: ReadonlyMap<number, string> = new Map([
  [10060, 'the subject is not captured by the expected stream'],
  [10054, "the message exceeds the stream's max_msg_size"],
]);

export const MSG_ID_HEADER = 'Nats-Msg-Id';
export const EXPECTED_STREAM_HEADER = 'Nats-Expected-Stream';

/** `message.topic`, else `${aggregateType}.${type}`. */
export const defaultSubject: (message: OutboxMessage) => string = defaultDestination;

/** Subjects already found fine: a relay publishes on few subjects, over and over. */
const validSubjects = new Set<string>();

/** Why NATS would refuse to publish on `subject`, or undefined when it is fine. */
export function subjectProblem(subject: string): string | undefined {
  if (validSubjects.has(subject)) return undefined;
  const problem = findSubjectProblem(subject);
  if (problem === undefined) {
    if (validSubjects.size >= 4096) validSubjects.clear();
    validSubjects.add(subject);
  }
  return problem;
}

function findSubjectProblem(subject: string): string | undefined {
  if (subject.length === 0) return 'is empty';
  if (/\s/.test(subject)) return 'contains whitespace';
  const tokens = subject.split('.');
  if (tokens.some((token) => token.length === 0))
    return 'has an empty token (leading, trailing or double dot)';
  if (tokens.some((token) => token === '*' || token === '>')) return 'contains a wildcard token (* or >)';
  return undefined;
}

/** Why a payload can never fit the server's `max_payload`, or undefined. */
export function payloadProblem(
  payloadBytes: number,
  subject: string,
  maxPayload: number | undefined,
): PublishOutcome | undefined {
  if (maxPayload === undefined || payloadBytes <= maxPayload) return undefined;
  return permanent(
    `Payload of ${payloadBytes} bytes for subject "${subject}" exceeds the server's ` +
      `max_payload of ${maxPayload} bytes`,
  );
}

/** Client-side headers for `js.publish` (the client adds `Nats-Msg-Id` and the expected stream). */
export function buildHeaders(values: Record<string, string>): MsgHdrs {
  const headers = natsHeaders();
  for (const [key, value] of Object.entries(values)) headers.set(key, value);
  return headers;
}

/** Header names already checked; names repeat (ce-*, user headers), so the check runs once each. */
const validNames = new Set<string>();

/**
 * The encoded NATS header block (`NATS/1.0\r\nName: value\r\n…\r\n\r\n`) of a JetStream publish:
 * `values` (the envelope), then `Nats-Msg-Id` and, with `stream`, `Nats-Expected-Stream`, in the
 * same order and with the same validation as the client's `MsgHdrs` would give. Built as text
 * and encoded once: the client's header object costs several scans per header on the hot path.
 * Throws on a header name or value NATS cannot carry.
 */
export function encodeHeaders(
  values: Readonly<Record<string, string>>,
  msgId: string,
  stream: string | undefined,
): Uint8Array {
  let text = 'NATS/1.0';
  for (const name in values) {
    if (name === MSG_ID_HEADER || name === EXPECTED_STREAM_HEADER) continue; // ours win, as with js.publish
    text += `\r\n${checkedName(name)}: ${checkedValue(values[name]!)}`;
  }
  text += `\r\n${MSG_ID_HEADER}: ${checkedValue(msgId)}`;
  if (stream !== undefined) text += `\r\n${EXPECTED_STREAM_HEADER}: ${checkedValue(stream)}`;
  // Buffer.from takes small strings from a shared pool: cheaper than a TextEncoder buffer each.
  return Buffer.from(`${text}\r\n\r\n`);
}

/** The client's rule (RFC 822 field name): printable ASCII, no colon. */
function checkedName(name: string): string {
  if (validNames.has(name)) return name;
  if (name.length === 0) throw new Error('a header name cannot be empty');
  for (let i = 0; i < name.length; i += 1) {
    const c = name.charCodeAt(i);
    if (c === 58 || c < 33 || c > 126) {
      throw new Error(`'${name[i]}' is not a valid character in a header name`);
    }
  }
  if (validNames.size >= 1024) validNames.clear();
  validNames.add(name);
  return name;
}

/** The client's rule: no CR or LF; surrounding whitespace trimmed. */
function checkedValue(value: string): string {
  if (value.includes('\n') || value.includes('\r')) {
    throw new Error('header values cannot contain \\r or \\n');
  }
  // Printable ASCII at both ends (the usual case): nothing to trim.
  const first = value.charCodeAt(0);
  const last = value.charCodeAt(value.length - 1);
  return first > 32 && first < 127 && last > 32 && last < 127 ? value : value.trim();
}

// --- outcomes -------------------------------------------------------------------------------

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
