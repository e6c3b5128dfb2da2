/**
 * Webhook receiver: the consumer side of `webhookPublisher`. Each POST is checked with
 * `verifyWebhook` (Standard Webhooks signature and timestamp tolerance; failure → 401,
 * which the publisher treats as permanent), read from its CloudEvents binary-mode `ce-*`
 * headers and body (no envelope → 400), and handled through the inbox, serialised per
 * aggregate by a KeyedQueue. The answer is sent only after `inbox.handle` resolved, that
 * is after the inbox transaction committed: 204 for processed/duplicate/stale/quarantined,
 * 503 with `Retry-After` for deferred or when the inbox itself failed (the sender retries).
 * Batch-mode requests (`application/cloudevents-batch+json`) are not supported (415).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { errorMessage, OutboxValidationError } from '../errors.js';
import type { Inbox, InboxHandler } from '../inbox/inbox.js';
import { fromEnvelope, type InboxMessage } from '../inbox/message.js';
import { type Logger, silentLogger } from '../logger.js';
import { verifyWebhook, type WebhookSecret } from '../publishers/webhook.js';
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
  readonly logger?: Logger;
}

export type WebhookRequestListener = (req: IncomingMessage, res: ServerResponse) => void;

/** Thrown while reading a body that exceeds `maxBodyBytes`. */
class TooLarge extends Error {}

/**
 * A node:http request listener receiving `webhookPublisher` deliveries into the inbox.
 *
 * @example
 * http.createServer(webhookReceiver({ inbox, handler, secret: process.env.WEBHOOK_SECRET! })).listen(8080);
 */
export function webhookReceiver<T = unknown>(options: WebhookReceiverOptions<T>): WebhookRequestListener {
  validate(options);
  const logger = options.logger ?? silentLogger;
  const queue = new KeyedQueue(options.concurrency ?? 16);
  const retryAfter = String(options.retryAfterSeconds ?? 1);
  const maxBodyBytes = options.maxBodyBytes ?? 1024 * 1024;
  const tolerance = options.toleranceSeconds ?? 300;

  const answer = (res: ServerResponse, status: number, headers: Record<string, string> = {}, text = '') => {
    if (res.headersSent) return;
    if (text === '') res.writeHead(status, headers).end();
    else res.writeHead(status, { ...headers, 'content-type': 'text/plain; charset=utf-8' }).end(text);
  };

  const serve = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (req.method !== 'POST') return answer(res, 405, { allow: 'POST' }, 'POST only');
    let body: Buffer;
    try {
      body = await readBody(req, maxBodyBytes);
    } catch (error) {
      if (error instanceof TooLarge) return answer(res, 413, { connection: 'close' }, 'body too large');
      throw error;
    }
    if (!verifyWebhook({ secret: options.secret, headers: req.headers, body, toleranceSeconds: tolerance })) {
      logger.warn({ webhookId: req.headers['webhook-id'] }, 'webhook rejected: bad signature or timestamp');
      return answer(res, 401, {}, 'invalid webhook signature or timestamp');
    }
    const contentType = String(req.headers['content-type'] ?? '');
    if (contentType.startsWith('application/cloudevents-batch+json'))
      return answer(res, 415, {}, 'batch mode is not supported by this receiver');
    let message: InboxMessage;
    try {
      message = fromEnvelope(flattenHeaders(req), body);
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
        return answer(res, 503, { 'retry-after': retryAfter }, `deferred: ${result.reason ?? ''}`);
      }
      return answer(res, 204, { 'x-inbox-status': result.status });
    } catch (error) {
      // The inbox itself failed (database down …): nothing was committed, the sender retries.
      logger.error({ err: error, eventId: message.eventId }, 'inbox failed; asking the sender to retry');
      return answer(res, 503, { 'retry-after': retryAfter }, 'inbox unavailable');
    }
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
  const server = createServer(webhookReceiver(options));
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
  verifyWebhook({ secret: options.secret, headers: {}, body: '' });
  for (const name of ['toleranceSeconds', 'concurrency', 'retryAfterSeconds', 'maxBodyBytes'] as const) {
    const v = options[name];
    if (v !== undefined && (!Number.isInteger(v) || v < (name === 'retryAfterSeconds' ? 0 : 1)))
      throw new OutboxValidationError(name, `is ${String(v)}`, 'Use a positive integer.');
  }
}

function readBody(req: IncomingMessage, max: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > max) {
        req.removeAllListeners('data');
        req.resume();
        reject(new TooLarge());
      } else chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

const SKIPPED_HEADERS = new Set([
  'host',
  'connection',
  'content-length',
  'transfer-encoding',
  'webhook-signature',
]);

function flattenHeaders(req: IncomingMessage): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || SKIPPED_HEADERS.has(name)) continue;
    headers[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return headers;
}
