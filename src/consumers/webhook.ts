/**
 * Webhook receiver: the consumer side of `webhookPublisher`. Each POST is checked with
 * `verifyWebhookEvent` — the Standard Webhooks signature and timestamp tolerance, the
 * signature over the event's headers (`txo-signed-headers`, `txo-signature`), and
 * `ce-id` = `webhook-id`; any failure → 401, which the publisher treats as permanent —
 * then read from the signed CloudEvents binary-mode `ce-*` headers and the body (no
 * envelope → 400): no unsigned header reaches the inbox or the handler. It is handled
 * through the inbox, serialised per aggregate by a KeyedQueue. The answer is sent only
 * after `inbox.handle` resolved, that is after the inbox transaction committed: 204 for
 * processed/duplicate/stale/quarantined, 503 with `Retry-After` for deferred or when the
 * inbox itself failed (the sender retries). Batch-mode requests
 * (`application/cloudevents-batch+json`) are not supported (415).
 *
 * A slow client cannot hold a connection: the body must arrive within `bodyTimeoutMs`
 * (408), and `createWebhookServer` also bounds the headers and the whole request. A
 * client that goes away mid-request is logged at debug level only.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { errorMessage, OutboxValidationError } from '../errors.js';
import type { Inbox, InboxHandler } from '../inbox/inbox.js';
import { fromEnvelope, type InboxMessage } from '../inbox/message.js';
import { type Logger, silentLogger } from '../logger.js';
import { decodeSecret, verifyWebhookEvent, type WebhookSecret } from '../publishers/webhook/signature.js';
import { aggregateKey } from './consumer.js';
import { KeyedQueue } from './keyed-queue.js';

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

export type WebhookRequestListener = (req: IncomingMessage, res: ServerResponse) => void;

/** Thrown while reading a body that exceeds `maxBodyBytes`. */
class TooLarge extends Error {}
/** Thrown while reading a body that did not arrive within `bodyTimeoutMs`. */
class TooSlow extends Error {}
/** Thrown while reading a body when the client closed the connection first. */
class ClientGone extends Error {}

const DEFAULT_BODY_TIMEOUT_MS = 10_000;
const DEFAULT_HEADERS_TIMEOUT_MS = 10_000;
const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;
/** How often node:http looks for connections past headersTimeout/requestTimeout (its default is 30 s). */
const CONNECTIONS_CHECK_MS = 500;

/**
 * A node:http request listener receiving `webhookPublisher` deliveries into the inbox.
 * It bounds the body (`bodyTimeoutMs`); the headers are the server's job: node's defaults
 * let a client trickle them for 60 s, so set `headersTimeout` (or use {@link createWebhookServer}).
 *
 * @example
 * http
 *   .createServer({ headersTimeout: 10_000, requestTimeout: 30_000 }, webhookReceiver({ inbox, handler, secret: process.env.WEBHOOK_SECRET! }))
 *   .listen(8080);
 */
export function webhookReceiver<T = unknown>(options: WebhookReceiverOptions<T>): WebhookRequestListener {
  validate(options);
  const logger = options.logger ?? silentLogger;
  const queue = new KeyedQueue(options.concurrency ?? 16);
  const retryAfter = String(options.retryAfterSeconds ?? 1);
  const maxBodyBytes = options.maxBodyBytes ?? 1024 * 1024;
  const tolerance = options.toleranceSeconds ?? 300;
  const bodyTimeoutMs = options.bodyTimeoutMs ?? DEFAULT_BODY_TIMEOUT_MS;

  const answer = (res: ServerResponse, status: number, headers: Record<string, string> = {}, text = '') => {
    if (res.headersSent) return;
    if (text === '') res.writeHead(status, headers).end();
    else res.writeHead(status, { ...headers, 'content-type': 'text/plain; charset=utf-8' }).end(text);
  };

  const serve = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (req.method !== 'POST') return answer(res, 405, { allow: 'POST' }, 'POST only');
    let body: Buffer;
    try {
      body = await readBody(req, maxBodyBytes, bodyTimeoutMs);
    } catch (error) {
      if (error instanceof ClientGone) {
        logger.debug(
          { webhookId: req.headers['webhook-id'] },
          'webhook client closed the connection mid-request',
        );
        return;
      }
      if (error instanceof TooLarge) return closeAfter(req, res, 413, 'body too large');
      if (error instanceof TooSlow) {
        logger.debug(
          { webhookId: req.headers['webhook-id'], bodyTimeoutMs },
          'webhook body too slow; closing',
        );
        return closeAfter(req, res, 408, `body not received within ${bodyTimeoutMs} ms`);
      }
      throw error;
    }
    const verified = verifyWebhookEvent({
      secret: options.secret,
      headers: req.headers,
      body,
      toleranceSeconds: tolerance,
    });
    if (!verified.ok) {
      logger.warn({ webhookId: req.headers['webhook-id'], reason: verified.reason }, 'webhook rejected');
      return answer(res, 401, {}, `invalid webhook: ${verified.reason}`);
    }
    const contentType = verified.headers['content-type'] ?? '';
    if (contentType.startsWith('application/cloudevents-batch+json'))
      return answer(res, 415, {}, 'batch mode is not supported by this receiver');
    let message: InboxMessage;
    try {
      message = fromEnvelope(verified.headers, body);
    } catch (error) {
      const reason = `no tx-outbox envelope: ${errorMessage(error)}`;
      logger.error({ webhookId: req.headers['webhook-id'], reason }, 'webhook rejected');
      return answer(res, 400, {}, reason);
    }
    try {
      const result = await queue.run(aggregateKey(message), () =>
        options.inbox.handle(message, options.handler),
      );
      if (result.status === 'deferred') {
        // The sender learns that it must retry, not the receiver's internals: a handler's
        // error text stays in the receiver's log and inbox.
        const why = result.error === undefined ? (result.reason ?? '') : 'the handler failed';
        return answer(res, 503, { 'retry-after': retryAfter }, `deferred: ${why}`);
      }
      return answer(res, 204, { 'x-inbox-status': result.status });
    } catch (error) {
      // The inbox itself failed (database down …): nothing was committed, the sender retries.
      logger.error({ err: error, eventId: message.eventId }, 'inbox failed; asking the sender to retry');
      return answer(res, 503, { 'retry-after': retryAfter }, 'inbox unavailable');
    }
  };

  /** Answers, then closes the connection: the rest of the body is not worth waiting for. */
  const closeAfter = (req: IncomingMessage, res: ServerResponse, status: number, text: string): void => {
    res.once('finish', () => req.destroy());
    answer(res, status, { connection: 'close' }, text);
  };

  return (req, res) => {
    serve(req, res).catch((error: unknown) => {
      logger.error({ err: error }, 'webhook receiver failed');
      answer(res, 500, {}, 'internal error');
    });
  };
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

export interface WebhookServer {
  readonly server: Server;
  /** `http://host:port` the server listens on. */
  readonly url: string;
  /** Stops accepting connections and waits for in-flight requests to be answered. Idempotent. */
  close(): Promise<void>;
}

/** Starts an HTTP server running {@link webhookReceiver}. */
export async function createWebhookServer<T = unknown>(
  options: WebhookServerOptions<T>,
): Promise<WebhookServer> {
  const listener = webhookReceiver(options);
  const { headersTimeoutMs, requestTimeoutMs } = serverTimeouts(options);
  const server = createServer(
    {
      headersTimeout: headersTimeoutMs,
      requestTimeout: requestTimeoutMs,
      connectionsCheckingInterval: Math.min(CONNECTIONS_CHECK_MS, headersTimeoutMs),
    },
    listener,
  );
  const host = options.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : (options.port ?? 0);
  let closing: Promise<void> | undefined;
  return {
    server,
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      });
      return closing;
    },
  };
}

function validate(options: WebhookReceiverOptions<never>): void {
  if (!options?.inbox || typeof options.inbox.handle !== 'function')
    throw new OutboxValidationError('inbox', 'is missing', 'Pass the inbox from createInbox().');
  if (typeof options.handler !== 'function')
    throw new OutboxValidationError('handler', 'is missing', 'Pass the function that applies an event.');
  if (options.secret === undefined || options.secret.length === 0)
    throw new OutboxValidationError('secret', 'is missing', 'Pass the secret shared with the publisher.');
  // A malformed secret throws here, not on the first request.
  decodeSecret(options.secret);
  for (const name of [
    'toleranceSeconds',
    'concurrency',
    'retryAfterSeconds',
    'maxBodyBytes',
    'bodyTimeoutMs',
  ] as const) {
    const v = options[name];
    if (v !== undefined && (!Number.isInteger(v) || v < (name === 'retryAfterSeconds' ? 0 : 1)))
      throw new OutboxValidationError(name, `is ${String(v)}`, 'Use a positive integer.');
  }
}

function serverTimeouts(options: WebhookServerOptions<never>): {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
} {
  for (const name of ['headersTimeoutMs', 'requestTimeoutMs'] as const) {
    const v = options[name];
    if (v !== undefined && (!Number.isInteger(v) || v < 1))
      throw new OutboxValidationError(name, `is ${String(v)}`, 'Use a positive integer of milliseconds.');
  }
  const headersTimeoutMs = options.headersTimeoutMs ?? DEFAULT_HEADERS_TIMEOUT_MS;
  const requestTimeoutMs = options.requestTimeoutMs ?? Math.max(DEFAULT_REQUEST_TIMEOUT_MS, headersTimeoutMs);
  if (headersTimeoutMs > requestTimeoutMs) {
    throw new OutboxValidationError(
      'headersTimeoutMs',
      `is ${headersTimeoutMs}, more than requestTimeoutMs (${requestTimeoutMs})`,
      'The headers are part of the request: make headersTimeoutMs <= requestTimeoutMs.',
    );
  }
  return { headersTimeoutMs, requestTimeoutMs };
}

/** The whole body, within `max` bytes and `timeoutMs`; rejects with TooLarge, TooSlow or ClientGone. */
function readBody(req: IncomingMessage, max: number, timeoutMs: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const settle = (error: Error | undefined): void => {
      clearTimeout(timer);
      req.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
      // Data still arriving after a refusal is dropped, not buffered.
      if (error !== undefined) req.on('error', () => {}).resume();
      if (error === undefined) resolve(Buffer.concat(chunks));
      else reject(error);
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > max) settle(new TooLarge());
      else chunks.push(chunk);
    };
    const onEnd = (): void => settle(undefined);
    // A client that goes away mid-body makes node emit 'error' (ECONNRESET, "aborted") and 'close'.
    const onError = (): void => settle(new ClientGone());
    const onClose = (): void => {
      if (!req.complete) settle(new ClientGone());
    };
    const timer = setTimeout(() => settle(new TooSlow()), timeoutMs);
    req.on('data', onData).on('end', onEnd).on('error', onError).on('close', onClose);
  });
}
