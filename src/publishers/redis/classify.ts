/**
 * The verdicts of the Redis Streams publisher: every way a command or a batch can end without
 * a success reply, as a PublishError (retryable or not, `BROKER_UNAVAILABLE` or not).
 */
import { ErrorReply } from 'redis';
import { BROKER_UNAVAILABLE, errorMessage, PublishError } from '../../errors.js';
import { abortError } from '../core/abort-error.js';

/** Reply codes saying the server cannot take writes now: not the message's fault. */
export const UNAVAILABLE_REPLIES: ReadonlySet<string> = new Set([
  'LOADING',
  'READONLY',
  'MASTERDOWN',
  'BUSY',
  'TRYAGAIN',
  'CLUSTERDOWN',
  'NOREPLICAS',
  'MISCONF',
  // maxmemory reached: a server-wide condition, so events that did nothing wrong are not
  // charged attempts (and dead-lettered) while it lasts.
  'OOM',
]);

/** Reply codes a retry may cure, charged as an attempt. */
export const RETRYABLE_REPLIES: ReadonlySet<string> = new Set(['NOSCRIPT']);

/**
 * The error code of a reply: its first word. Redis 7 passes a script's failing command's
 * error through (`WRONGTYPE … script: <sha>, on @user_script:1.`); Redis 6 wraps it in
 * `ERR Error running script (call to f_<sha>): @user_script:5: WRONGTYPE …`.
 */
export function replyCode(message: string): string {
  if (message.startsWith('ERR Error running script')) {
    const inner = /@user_script:\d+: (-?)([A-Z]+) /.exec(message);
    if (inner !== null) return inner[2]!;
  }
  const space = message.indexOf(' ');
  return space === -1 ? message : message.slice(0, space);
}

/** An error reply of the server (as opposed to a client or connection error). */
export function isErrorReply(error: Error): boolean {
  // instanceof fails when the client comes from another copy of @redis/client.
  return error instanceof ErrorReply || /^(ErrorReply|SimpleError|BlobError)$/.test(error.constructor.name);
}

/** The server does not know the append script (restart, failover, SCRIPT FLUSH). */
export function isNoScript(error: Error): boolean {
  return isErrorReply(error) && error.message.startsWith('NOSCRIPT');
}

/**
 * The verdict on a command that got an error instead of a reply: a connection error or a reply
 * saying the server cannot take writes is `BROKER_UNAVAILABLE`; NOSCRIPT is retryable (an
 * attempt); any other error reply (WRONGTYPE, ERR …) is permanent. `what` names the event and
 * its stream, `where` the server.
 */
export function commandVerdict(error: Error, what: string, where: string): PublishError {
  if (!isErrorReply(error)) {
    // Connection refused/reset/closed, client offline or closed, socket timeout …
    return new PublishError(`Redis is not available (${where}) for ${what}: ${errorMessage(error)}`, {
      retryable: true,
      code: BROKER_UNAVAILABLE,
      cause: error,
    });
  }
  const code = replyCode(error.message);
  if (UNAVAILABLE_REPLIES.has(code)) {
    return new PublishError(`Redis cannot take writes now (${what}): ${error.message}`, {
      retryable: true,
      code: BROKER_UNAVAILABLE,
      cause: error,
    });
  }
  if (RETRYABLE_REPLIES.has(code)) {
    return new PublishError(`Redis refused ${what} for now: ${error.message}`, {
      retryable: true,
      cause: error,
    });
  }
  return new PublishError(`Redis refused ${what}: ${error.message}`, { retryable: false, cause: error });
}

/** No reply within the batch's time limit: the broker's fault; the entry may have been stored. */
export function noReplyInTime(what: string, where: string, timeoutMs: number, cause: unknown): PublishError {
  return new PublishError(
    `No reply from Redis (${where}) within ${timeoutMs} ms for ${what}; it may have been stored (a republish is deduplicated)`,
    { retryable: true, code: BROKER_UNAVAILABLE, cause },
  );
}

/** The caller aborted the batch (with `reason`) while the command awaited its reply. */
export function abortedBeforeReply(what: string, reason: unknown): PublishError {
  return new PublishError(`Publish of ${what} aborted before Redis replied: ${errorMessage(reason)}`, {
    retryable: true,
    cause: abortError(reason),
  });
}

/** The caller aborted the batch (with `reason`) before its commands were sent. */
export function batchAborted(reason: unknown): PublishError {
  return new PublishError(`Redis publish aborted: ${errorMessage(reason)}`, {
    retryable: true,
    cause: abortError(reason),
  });
}

/** The client is not ready (not connected, reconnecting, connect timed out or failed). */
export function notAvailable(where: string, error: unknown, lastError: Error | undefined): PublishError {
  const last = lastError === undefined ? '' : ` (last client error: ${errorMessage(lastError)})`;
  return new PublishError(`Redis is not available (${where}): ${errorMessage(error)}${last}`, {
    retryable: true,
    code: BROKER_UNAVAILABLE,
    cause: error,
  });
}
