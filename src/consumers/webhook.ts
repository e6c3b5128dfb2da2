/**
 * Webhook receiver: the consumer side of `webhookPublisher`. Each POST is checked with
 * `verifyWebhookEvent` — the Standard Webhooks signature and timestamp tolerance, the
 * signature over the event's headers (`txo-signed-headers`, `txo-signature`), and
 * `ce-id` = `webhook-id`; any failure → 401, which the publisher treats as permanent —
 * then read from the signed headers only, so no unsigned header reaches the inbox or the
 * handler: in binary mode the `ce-*` headers and the body through `fromEnvelope` (the
 * current HTTP binding, percent-encoded with `content-type` as the data content type, and
 * what 0.1 wrote: raw values and `ce-datacontenttype`); with a signed `content-type` of
 * `application/cloudevents-batch+json` each event of the (signed) JSON body
 * (webhook-batch.ts). No envelope, or a value that does not decode → 400, logged. Each
 * event is handled through the inbox, serialised per aggregate by a KeyedQueue. The answer
 * is sent only after `inbox.handle` resolved for every event of the request, that is after
 * the inbox transactions committed: 204 when each was processed/duplicate/stale/quarantined,
 * 503 with `Retry-After` when one was deferred or the inbox itself failed (the sender
 * retries the whole request; what was applied comes back as duplicates).
 *
 * A slow client cannot hold a connection: the body must arrive within `bodyTimeoutMs`
 * (408), and `createWebhookServer` also bounds the headers and the whole request. A
 * client that goes away mid-request is logged at debug level only.
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { PoolClient } from 'pg';
import { isEnvelopeName, repeatedHeader } from '../envelope/read.js';
import { errorMessage } from '../errors.js';
import { fromEnvelope, type InboxMessage } from '../inbox/message.js';
import { verifyWebhookEvent } from '../publishers/webhook/signature.js';
import { noteDelivery } from '../tracing/process-span.js';
import { aggregateKey } from './consumer.js';
import { KeyedQueue } from './keyed-queue.js';
import { ConsumerLifecycle } from './lifecycle.js';
import { isBatch, readBatch } from './webhook-batch.js';
import {
  resolveWebhookReceiverOptions,
  resolveWebhookServerOptions,
  type WebhookReceiverOptions,
  type WebhookServerOptions,
} from './webhook-options.js';

export type { WebhookReceiverOptions, WebhookServerOptions } from './webhook-options.js';

export type WebhookRequestListener = (req: IncomingMessage, res: ServerResponse) => void;

/** Thrown while reading a body that exceeds `maxBodyBytes`. */
class TooLarge extends Error {}
/** Thrown while reading a body that did not arrive within `bodyTimeoutMs`. */
class TooSlow extends Error {}
/** Thrown while reading a body when the client closed the connection first. */
class ClientGone extends Error {}

/** How often node:http looks for connections past headersTimeout/requestTimeout (its default is 30 s). */
const CONNECTIONS_CHECK_MS = 500;
/** Largest request head (request line and headers) the receiver reads, in bytes. */
const MAX_HEADER_BYTES = 32 * 1024;

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
export function webhookReceiver<T = unknown, Tx = PoolClient>(
  options: WebhookReceiverOptions<T, Tx>,
): WebhookRequestListener {
  const o = resolveWebhookReceiverOptions(options);
  const { logger, retryAfter, maxBodyBytes, bodyTimeoutMs } = o;
  const queue = new KeyedQueue(o.concurrency);

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
      secret: o.secret,
      headers: req.headers,
      body,
      toleranceSeconds: o.toleranceSeconds,
    });
    if (!verified.ok) {
      logger.warn({ webhookId: req.headers['webhook-id'], reason: verified.reason }, 'webhook rejected');
      return answer(res, 401, {}, `invalid webhook: ${verified.reason}`);
    }
    const webhookId = verified.id;
    const batch = isBatch(verified.headers['content-type'] ?? '');
    let messages: InboxMessage[];
    try {
      // Node joins a repeated header's values with ", " (the signer's Headers did the same):
      // an attribute sent twice is refused, not read as one joined value.
      for (const name in verified.headers) {
        const lines = req.headersDistinct[name.toLowerCase()]?.length ?? 0;
        if (lines > 1 && isEnvelopeName(name)) throw repeatedHeader(name, 'request');
      }
      messages = batch ? readBatch(body) : [fromEnvelope(verified.headers, body)];
      const path = (req.url ?? '/').split('?')[0]!;
      for (const m of messages) noteDelivery(m, { system: 'webhook', destination: path });
    } catch (error) {
      // Signed, so sent by someone holding the secret: a sender bug or a foreign sender, not
      // worth a retry (4xx is permanent for webhookPublisher). A value that is not valid
      // percent-encoding lands here too, naming its header.
      const reason = `${batch ? 'unreadable batch' : 'no readable tx-outbox envelope'}: ${errorMessage(error)}`;
      logger.error({ webhookId, reason }, 'webhook rejected');
      return answer(res, 400, {}, reason);
    }
    const results = await Promise.allSettled(
      messages.map((message) => queue.run(aggregateKey(message), () => o.inbox.handle(message, o.handler))),
    );
    let failed = 0;
    let deferred = 0;
    let why = '';
    results.forEach((result, index) => {
      if (result.status === 'rejected') {
        failed += 1;
        logger.error(
          { err: result.reason, eventId: messages[index]!.eventId },
          'inbox failed; asking the sender to retry',
        );
      } else if (result.value.status === 'deferred') {
        deferred += 1;
        // The sender learns that it must retry, not the receiver's internals: a handler's
        // error text stays in the receiver's log and inbox.
        why = result.value.error === undefined ? (result.value.reason ?? '') : 'the handler failed';
      }
    });
    // The inbox itself failed (database down …): nothing of it was committed, the sender retries.
    if (failed > 0) return answer(res, 503, { 'retry-after': retryAfter }, 'inbox unavailable');
    if (deferred > 0) {
      const text = batch ? `deferred: ${deferred} of ${messages.length} events` : `deferred: ${why}`;
      return answer(res, 503, { 'retry-after': retryAfter }, text);
    }
    const single = results[0];
    if (!batch && single?.status === 'fulfilled') {
      return answer(res, 204, { 'x-inbox-status': single.value.status });
    }
    return answer(res, 204);
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

export interface WebhookServer {
  readonly server: Server;
  /** `http://host:port` the server listens on. */
  readonly url: string;
  /** Stops accepting connections and waits for in-flight requests to be answered. Idempotent. */
  close(): Promise<void>;
}

/** Starts an HTTP server running {@link webhookReceiver}. */
export async function createWebhookServer<T = unknown, Tx = PoolClient>(
  options: WebhookServerOptions<T, Tx>,
): Promise<WebhookServer> {
  const listener = webhookReceiver(options);
  const { port: wanted, host, headersTimeoutMs, requestTimeoutMs } = resolveWebhookServerOptions(options);
  const server = createServer(
    {
      // Twice Node's 16 KiB default: what enqueue accepts fits that already (see MAX_HEADERS_BYTES),
      // this leaves room for what a proxy on the way adds. Not an option, just a safer default.
      maxHeaderSize: MAX_HEADER_BYTES,
      headersTimeout: headersTimeoutMs,
      requestTimeout: requestTimeoutMs,
      connectionsCheckingInterval: Math.min(CONNECTIONS_CHECK_MS, headersTimeoutMs),
    },
    listener,
  );
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(wanted, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : wanted;
  const life = new ConsumerLifecycle(
    undefined,
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      }),
  );
  return {
    server,
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    close: () => life.stop(),
  };
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
