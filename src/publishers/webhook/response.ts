/**
 * What a webhook POST came to, as a publish outcome: the receiver's status (2xx delivered;
 * 3xx and 4xx permanent except 408 and 429; 5xx retryable, 502/503/504 the receiver being
 * unavailable), a network error (unreachable codes from src/network-errors.ts are
 * BROKER_UNAVAILABLE), or an abort, worded by its cause.
 */

import { BROKER_UNAVAILABLE, PublishError } from '../../errors.js';
import { unreachableCode } from '../../network-errors.js';
import { DELIVERED, failed, type PublishOutcome } from '../contract.js';
import type { AbortCause } from '../core/call-abort.js';
import type { Endpoint } from './endpoints.js';

/** Characters of a response body quoted in an error message. */
export const ERROR_BODY_CHARS = 200;
/** Bytes of a response body read to let the socket be reused; beyond this the body is cancelled. */
export const MAX_DRAIN_BYTES = 64 * 1024;

/** What of an endpoint a message about it needs. */
type Named = Pick<Endpoint, 'label' | 'scrub'>;

/** Reads (a bounded part of) a response body so the socket can be reused; returns its start as text. */
export async function drain(response: Response): Promise<string> {
  const body = response.body;
  if (body === null) return '';
  const reader = body.getReader();
  const kept: Uint8Array[] = [];
  let total = 0;
  try {
    while (total <= MAX_DRAIN_BYTES) {
      const chunk = await reader.read();
      if (chunk.done) return snippet(kept);
      if (total < ERROR_BODY_CHARS * 4) kept.push(chunk.value);
      total += chunk.value.length;
    }
    await reader.cancel();
  } catch {
    // The body is only informative; a broken or aborted stream is not the outcome.
    reader.cancel().catch(() => {});
  }
  return snippet(kept);
}

function snippet(chunks: readonly Uint8Array[]): string {
  const text = Buffer.concat(chunks).toString('utf8').replace(/\s+/g, ' ').trim();
  return text.length > ERROR_BODY_CHARS ? `${text.slice(0, ERROR_BODY_CHARS)}…` : text;
}

/**
 * Retry-After as milliseconds: delay-seconds or an HTTP-date (0 when already
 * past); undefined when absent or unparseable.
 */
export function parseRetryAfter(value: string | null, now = Date.now()): number | undefined {
  if (value === null) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const date = Date.parse(trimmed);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

/** 3xx and 4xx are the receiver's final word, except 408 Request Timeout and 429 Too Many Requests. */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 429 || status >= 500;
}

/** The outcome of an answer; `body` is the start of the response body (see {@link drain}). */
export function statusOutcome(response: Response, endpoint: Named, body: string): PublishOutcome {
  const { status } = response;
  if (status >= 200 && status < 300) return DELIVERED;
  const retryable = isRetryableStatus(status);
  const redirect =
    status >= 300 && status < 400 ? ' (redirects are not followed: point `endpoints` at the final URL)' : '';
  // A receiver's error page may repeat the request, query token included.
  const text = body === '' ? '' : `: ${endpoint.scrub(body)}`;
  const message = `Webhook POST ${endpoint.label} answered HTTP ${status} ${response.statusText}${redirect}${text}`;
  const retryAfterMs = retryable ? parseRetryAfter(response.headers.get('retry-after')) : undefined;
  // 502/503/504 say the receiver is down or overloaded, not that this event is bad.
  const code = status === 502 || status === 503 || status === 504 ? BROKER_UNAVAILABLE : undefined;
  return failed(new PublishError(message, { retryable, retryAfterMs, code }), retryable, retryAfterMs);
}

/** A request that stopped waiting (for a slot or for its answer): retryable, worded by the cause. */
export function abortOutcome(cause: AbortCause, endpoint: Named, timeoutMs: number): PublishOutcome {
  const reasons: Record<AbortCause, string> = {
    caller: "was aborted by the caller's signal",
    closed: 'was aborted because the webhook publisher was closed',
    timeout: `timed out after ${timeoutMs} ms (option \`timeoutMs\`)`,
  };
  const error = new PublishError(`Webhook POST ${endpoint.label} ${reasons[cause]}`, { retryable: true });
  return failed(error, true);
}

/** A timed-out request's outcome as the endpoint being unreachable (no attempt charged). */
export function silentOrigin(outcome: PublishOutcome, origin: string): PublishOutcome {
  if (outcome.ok) return outcome;
  const message = `${outcome.error.message}; no response from ${origin} since it was sent: the connection is in doubt`;
  return failed(
    new PublishError(message, { retryable: true, code: BROKER_UNAVAILABLE, cause: outcome.error }),
    true,
  );
}

/**
 * A fetch that failed without an answer (and without an abort): retryable; BROKER_UNAVAILABLE
 * (no attempt charged) when the error or its cause chain carries an unreachable socket code.
 */
export function networkOutcome(error: unknown, endpoint: Named): PublishOutcome {
  const cause = error instanceof Error && error.cause instanceof Error ? error.cause : error;
  const code = (cause as { code?: unknown } | null)?.code;
  const detail = `${cause instanceof Error ? cause.message : String(cause)}${typeof code === 'string' ? ` (${code})` : ''}`;
  const unreachable = unreachableCode(error) !== undefined;
  return failed(
    new PublishError(`Webhook POST ${endpoint.label} failed: ${endpoint.scrub(detail)}`, {
      retryable: true,
      cause: error,
      code: unreachable ? BROKER_UNAVAILABLE : undefined,
    }),
    true,
  );
}
