/** Options of {@link webhookReceiver} and {@link createWebhookServer}: the checks and the defaults, resolved once. */
import type { PoolClient } from 'pg';
import { OutboxValidationError } from '../errors.js';
import { checkInboxAndHandler, checkIntegers } from '../options/checks.js';
import { decodeSecret, type WebhookSecret } from '../publishers/webhook/signature.js';
import { type ConsumerOptions, consumerDefaults, type ResolvedConsumerOptions } from './options.js';

/** `concurrency`: requests handled at once (across aggregates), default 16. */
export interface WebhookReceiverOptions<T = unknown, Tx = PoolClient>
  extends Omit<ConsumerOptions<T, Tx>, 'signal'> {
  /** The Standard Webhooks secret shared with the publisher. */
  readonly secret: WebhookSecret;
  /** Maximum distance between `webhook-timestamp` and now, in seconds. Default 300. */
  readonly toleranceSeconds?: number;
  /** `Retry-After` of a deferred delivery, in seconds. Default 1. */
  readonly retryAfterSeconds?: number;
  /** Largest accepted body (in batch mode the whole JSON array); larger requests get 413. Default 1 MiB. */
  readonly maxBodyBytes?: number;
  /** Time from the request's headers to the end of its body; a slower body gets 408 and the connection closed. Default 10 000 ms. */
  readonly bodyTimeoutMs?: number;
}

type Defaulted = 'toleranceSeconds' | 'retryAfterSeconds' | 'maxBodyBytes' | 'bodyTimeoutMs';

export interface ResolvedWebhookReceiverOptions<T = unknown, Tx = PoolClient>
  extends Omit<WebhookReceiverOptions<T, Tx>, Defaulted | 'concurrency' | 'logger'>,
    Omit<ResolvedConsumerOptions<T, Tx>, 'signal'> {
  readonly toleranceSeconds: number;
  /** The `Retry-After` header value. */
  readonly retryAfter: string;
  readonly maxBodyBytes: number;
  readonly bodyTimeoutMs: number;
}

export interface WebhookServerOptions<T = unknown, Tx = PoolClient> extends WebhookReceiverOptions<T, Tx> {
  /** Port to listen on; 0 picks a free one. Default 0. */
  readonly port?: number;
  /** Default `127.0.0.1`. */
  readonly host?: string;
  /** Time to receive a request's headers (node's `server.headersTimeout`); then 408 and closed. Default 10 000 ms. */
  readonly headersTimeoutMs?: number;
  /** Time to receive a whole request (node's `server.requestTimeout`); then 408 and closed. Default 30 000 ms. */
  readonly requestTimeoutMs?: number;
}

export type ResolvedWebhookServerOptions = Readonly<
  Required<
    Pick<WebhookServerOptions<never, never>, 'port' | 'host' | 'headersTimeoutMs' | 'requestTimeoutMs'>
  >
>;

const DEFAULT_BODY_TIMEOUT_MS = 10_000;
const DEFAULT_HEADERS_TIMEOUT_MS = 10_000;
const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;

/** Checked (errors name the option and the fix; a malformed secret throws here), defaults in. */
export function resolveWebhookReceiverOptions<T, Tx>(
  options: WebhookReceiverOptions<T, Tx>,
): ResolvedWebhookReceiverOptions<T, Tx> {
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
    ...options,
    ...consumerDefaults(options),
    toleranceSeconds: options.toleranceSeconds ?? 300,
    retryAfter: String(options.retryAfterSeconds ?? 1),
    maxBodyBytes: options.maxBodyBytes ?? 1024 * 1024,
    bodyTimeoutMs: options.bodyTimeoutMs ?? DEFAULT_BODY_TIMEOUT_MS,
  });
}

/** The server's own options (the receiver's are resolved by {@link resolveWebhookReceiverOptions}). */
export function resolveWebhookServerOptions<T, Tx>(
  options: WebhookServerOptions<T, Tx>,
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
