/**
 * The verdict on a Kafka failure: which protocol codes a retry cannot cure, when the brokers
 * are unreachable (BROKER_UNAVAILABLE: no attempt is charged), when a topic is missing.
 */
import { BROKER_UNAVAILABLE, errorMessage, PublishError } from '../../errors.js';
import { isUnreachableCode } from '../../network-errors.js';
import type { AbortCause } from '../core/call-abort.js';

/** Produce error codes a retry cannot cure, with the reason given to the user. */
export const PERMANENT_CODES: ReadonlyMap<number, string> = new Map([
  [10, "the message is larger than the topic's max.message.bytes (MESSAGE_TOO_LARGE)"],
  [18, "the record batch is larger than the topic's max.message.bytes (RECORD_LIST_TOO_LARGE)"],
  [17, 'the broker rejects the topic name (INVALID_TOPIC_EXCEPTION)'],
  [29, 'not authorized to write to the topic (TOPIC_AUTHORIZATION_FAILED)'],
  [31, 'not authorized on the cluster, e.g. IdempotentWrite (CLUSTER_AUTHORIZATION_FAILED)'],
  [53, 'not authorized for the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)'],
  [21, 'the broker rejects acks=all (INVALID_REQUIRED_ACKS)'],
  [32, "the record's timestamp is out of the topic's accepted range (INVALID_TIMESTAMP)"],
  [43, 'the topic does not accept this record format (UNSUPPORTED_FOR_MESSAGE_FORMAT)'],
  [44, "the topic's policy rejects the record (POLICY_VIOLATION)"],
  [76, 'the topic does not accept the compression type (UNSUPPORTED_COMPRESSION_TYPE)'],
  [87, 'the broker rejects the record (INVALID_RECORD)'],
]);
/** MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE: a smaller request may fit. */
export const TOO_LARGE_CODES: ReadonlySet<number> = new Set([10, 18]);
export const TOPIC_ALREADY_EXISTS = 36;
const UNKNOWN_TOPIC_OR_PARTITION = 3;

/** Client messages that mean the brokers cannot be reached. */
const UNREACHABLE_MESSAGE = /Client is closed|Connection pool is closed|Cannot connect to any broker/;

/** Depth-first over an error and its `errors` (MultipleErrors) and `cause` chain, in order. */
export function visit(error: unknown, fn: (node: object) => void, depth = 0): void {
  if (typeof error !== 'object' || error === null || depth > 8) return;
  fn(error);
  const children = (error as { errors?: unknown }).errors;
  if (Array.isArray(children)) for (const child of children) visit(child, fn, depth + 1);
  visit((error as { cause?: unknown }).cause, fn, depth + 1);
}

/** Kafka protocol error codes anywhere in an error tree. */
export function protocolCodes(error: unknown): number[] {
  const codes: number[] = [];
  visit(error, (node) => {
    const code = (node as { apiCode?: unknown }).apiCode;
    if (typeof code === 'number') codes.push(code);
  });
  return codes;
}

/**
 * The verdict on a failure of a whole call (no per-partition answer): a permanent Kafka code
 * that is not partition-specific, the brokers being unreachable, or something retryable.
 */
export function classify(error: unknown, what: string): PublishError {
  let unreachable = false;
  let authentication = false;
  let permanentCode: number | undefined;
  visit(error, (node) => {
    const code = (node as { code?: unknown }).code;
    // PLT_KFK_TIMEOUT: a request the broker never answered.
    if (code === 'PLT_KFK_NETWORK' || code === 'PLT_KFK_TIMEOUT' || isUnreachableCode(code)) {
      unreachable = true;
    }
    if (code === 'PLT_KFK_AUTHENTICATION') authentication = true;
    if (UNREACHABLE_MESSAGE.test(errorMessage(node))) unreachable = true;
    const apiCode = (node as { apiCode?: unknown }).apiCode;
    const path = (node as { path?: unknown }).path;
    const partitionLevel = typeof path === 'string' && path.includes('partition');
    if (typeof apiCode === 'number' && PERMANENT_CODES.has(apiCode) && !partitionLevel)
      permanentCode = apiCode;
  });
  const detail = deepestMessage(error);
  if (permanentCode !== undefined) {
    return new PublishError(`Kafka refused ${what}: ${PERMANENT_CODES.get(permanentCode)}`, {
      retryable: false,
      cause: error,
    });
  }
  if (authentication) {
    // Credentials are configuration: the events are not at fault, so no attempt is charged.
    return new PublishError(`Kafka authentication failed: ${detail}`, {
      retryable: true,
      code: BROKER_UNAVAILABLE,
      cause: error,
    });
  }
  if (unreachable) {
    return new PublishError(`Kafka is not available (${what}): ${detail}`, {
      retryable: true,
      code: BROKER_UNAVAILABLE,
      cause: error,
    });
  }
  return new PublishError(`Kafka publish of ${what} failed: ${detail}`, { retryable: true, cause: error });
}

/** The most specific message in an error tree (the last leaf), with the top one for context. */
export function deepestMessage(error: unknown): string {
  let leaf: unknown = error;
  visit(error, (node) => {
    const children = (node as { errors?: unknown }).errors;
    if (!Array.isArray(children) || children.length === 0) leaf = node;
  });
  const top = errorMessage(error);
  const deep = errorMessage(leaf);
  return deep === top ? top : `${top} (${deep})`;
}

/** Whether a metadata failure says the topic does not exist. */
export function isUnknownTopic(error: unknown): boolean {
  let unknown = false;
  visit(error, (node) => {
    if ((node as { apiCode?: unknown }).apiCode === UNKNOWN_TOPIC_OR_PARTITION) unknown = true;
    if (/^Unknown topic /.test(errorMessage(node))) unknown = true;
  });
  return unknown;
}

/** A failure the publisher reports for a whole call that is not a Kafka error: retryable. */
export function unexpected(error: unknown): PublishError {
  return new PublishError(`Kafka publish failed: ${errorMessage(error)}`, {
    retryable: true,
    cause: error,
  });
}

/**
 * The verdict when a publish stopped waiting: no answer within `timeoutMs` (Kafka answers every
 * produce request, refusals and its own timeouts included: no answer at all leaves the
 * connection in doubt, a stall or a half-open link, the broker's fault), or the caller aborted.
 */
export function gaveUp(cause: AbortCause, reason: unknown, timeoutMs: number): PublishError {
  if (cause === 'timeout') {
    return new PublishError(
      `Kafka did not acknowledge within ${timeoutMs} ms: no answer, the connection is in doubt`,
      { retryable: true, code: BROKER_UNAVAILABLE },
    );
  }
  return new PublishError(`Publish aborted before Kafka acknowledged: ${errorMessage(reason)}`, {
    retryable: true,
    cause: reason,
  });
}
