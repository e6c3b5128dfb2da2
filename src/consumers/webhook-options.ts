/** Options of {@link webhookReceiver} and {@link createWebhookServer}: the checks and the defaults, resolved once. */
import { OutboxValidationError } from '../errors.js';
import type { Inbox, InboxHandler } from '../inbox/inbox.js';
import { type Logger, silentLogger } from '../logger.js';
import { checkInboxAndHandler, checkIntegers } from '../options/checks.js';
import { decodeSecret, type WebhookSecret } from '../publishers/webhook-signature.js';
import { DEFAULT_CONCURRENCY } from './options.js';

export interface WebhookReceiverOptions<T = unknown> {
  readonly inbox: Inbox<T>;
  readonly handler: InboxHandler<T>;
  /** The Standard Webhooks secret shared with the publisher. */
  readonly secret: WebhookSecret;
  /** Maximum distance between `webhook-timestamp` and now, in seconds. Default 300. */
  readonly toleranceSeconds?: number;
  /** Requests handled at once (across aggregates). Default 16. */
  readonly concurrency?: number;
  /** `Retry-After` of a deferred delivery, in seconds. Default 1. */
  readonly retryAfterSeconds?: number;
  /** Largest accepted body; larger requests get 413. Default 1 MiB. */
  readonly maxBodyBytes?: number;
  /** Time from the request's headers to the end of its body; a slower body gets 408 and the connection closed. Default 10 000 ms. */
  readonly bodyTimeoutMs?: number;
  readonly logger?: Logger;
}

export interface ResolvedWebhookReceiverOptions<T = unknown> {
  readonly inbox: Inbox<T>;
  readonly handler: InboxHandler<T>;
  readonly secret: WebhookSecret;
  readonly toleranceSeconds: number;
  readonly concurrency: number;
  /** The `Retry-After` header value. */
  readonly retryAfter: string;
  readonly maxBodyBytes: number;
  readonly bodyTimeoutMs: number;
  readonly logger: Logger;
}

export interface WebhookServerOptions<T = unknown> extends WebhookReceiverOptions<T> {
  /** Port to listen on; 0 picks a free one. Default 0. */
  readonly port?: number;
  /** Default `127.0.0.1`. */
  readonly host?: string;
  /** Time to receive a request's headers (node's `server.headersTimeout`); then 408 and closed. Default 10 000 ms. */
  readonly headersTimeoutMs?: number;
  /** Time to receive a whole request (node's `server.requestTimeout`); then 408 and closed. Default 30 000 ms. */
  readonly requestTimeoutMs?: number;
}

export interface ResolvedWebhookServerOptions {
  readonly port: number;
  readonly host: string;
  readonly headersTimeoutMs: number;
  readonly requestTimeoutMs: number;
}

const DEFAULT_BODY_TIMEOUT_MS = 10_000;
const DEFAULT_HEADERS_TIMEOUT_MS = 10_000;
const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;

/** Checked (errors name the option and the fix; a malformed secret throws here), defaults in. */
export function resolveWebhookReceiverOptions<T>(
  options: WebhookReceiverOptions<T>,
): ResolvedWebhookReceiverOptions<T> {
  checkInboxAndHandler(options);
  if (options.secret === undefined || options.secret.length === 0)
    throw new OutboxValidationError('secret', 'is missing', 'Pass the secret shared with the publisher.');
  // A malformed secret throws here, not on the first request.
  decodeSecret(options.secret);
  checkIntegers(options, {
    toleranceSeconds: 1,
    concurrency: 1,
    retryAfterSeconds: 0,
    maxBodyBytes: 1,
    bodyTimeoutMs: 1,
  });
  return Object.freeze({
    inbox: options.inbox,
    handler: options.handler,
    secret: options.secret,
    toleranceSeconds: options.toleranceSeconds ?? 300,
    concurrency: options.concurrency ?? DEFAULT_CONCURRENCY,
    retryAfter: String(options.retryAfterSeconds ?? 1),
    maxBodyBytes: options.maxBodyBytes ?? 1024 * 1024,
    bodyTimeoutMs: options.bodyTimeoutMs ?? DEFAULT_BODY_TIMEOUT_MS,
    logger: options.logger ?? silentLogger,
  });
}

/** The server's own options (the receiver's are resolved by {@link resolveWebhookReceiverOptions}). */
export function resolveWebhookServerOptions(
  options: WebhookServerOptions<never>,
): ResolvedWebhookServerOptions {
  checkIntegers(
    options,
    { headersTimeoutMs: 1, requestTimeoutMs: 1 },
    'Use a positive integer of milliseconds.',
  );
  const headersTimeoutMs = options.headersTimeoutMs ?? DEFAULT_HEADERS_TIMEOUT_MS;
  const requestTimeoutMs = options.requestTimeoutMs ?? Math.max(DEFAULT_REQUEST_TIMEOUT_MS, headersTimeoutMs);
  if (headersTimeoutMs > requestTimeoutMs) {
    throw new OutboxValidationError(
      'headersTimeoutMs',
      `is ${headersTimeoutMs}, more than requestTimeoutMs (${requestTimeoutMs})`,
      'The headers are part of the request: make headersTimeoutMs <= requestTimeoutMs.',
    );
  }
  return Object.freeze({
    port: options.port ?? 0,
    host: options.host ?? '127.0.0.1',
    headersTimeoutMs,
    requestTimeoutMs,
  });
}
