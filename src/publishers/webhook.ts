/**
 * Webhook publisher: POSTs each event to an HTTP endpoint, signed with
 * Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature`)
 * and carrying the envelope as CloudEvents attributes — binary mode (ce-*
 * headers, payload bytes as the body) or, with `batch`, structured batch mode
 * (`application/cloudevents-batch+json`).
 *
 * Uses Node's global fetch (undici); no dependencies.
 */

import { setMaxListeners } from 'node:events';
import { BROKER_UNAVAILABLE, OutboxValidationError, PublishError } from '../errors.js';
import { DELIVERED, failed, type OutboxMessage, type Publisher, type PublishOutcome } from './contract.js';
import { publisherClosed } from './core/closed.js';
import { LinkActivity } from './core/link-activity.js';
import { Slots } from './core/slots.js';
import { envelopeHeaders } from './envelope.js';
import {
  type Endpoint,
  type EndpointResolver,
  endpointResolver,
  type WebhookEndpoints,
} from './webhook-endpoints.js';
import { decodeSecret, signatureHeaders, type WebhookSecret } from './webhook-signature.js';

export {
  type SignWebhookInput,
  type SignWebhookRequestInput,
  signWebhook,
  signWebhookRequest,
  type VerifyWebhookInput,
  verifyWebhook,
  verifyWebhookEvent,
  type WebhookSecret,
  type WebhookVerification,
} from './webhook-signature.js';
export type { WebhookEndpoints };

export interface WebhookPublisherOptions {
  /**
   * Target URL(s), see {@link WebhookEndpoints}. Only http: and https: URLs are accepted; a
   * user name and password in one are sent as `Authorization: Basic`.
   */
  readonly endpoints: WebhookEndpoints;
  /** Signing secret shared with the receivers, see {@link WebhookSecret}. */
  readonly secret: WebhookSecret;
  /** Deadline per request, from sending to the end of the response body. Default 10 000 ms. */
  readonly timeoutMs?: number;
  /** Maximum requests in flight across all `publish` calls of this publisher. Default 64. */
  readonly concurrency?: number;
  /**
   * Batch mode: messages bound for the same URL are POSTed together (at most
   * `maxSize` per request) as a CloudEvents JSON batch. The request's outcome
   * applies to every message in it.
   */
  readonly batch?: { readonly maxSize: number };
  /** Extra static headers on every request (e.g. an API key). Protocol headers take precedence. */
  readonly headers?: Readonly<Record<string, string>>;
  /** CloudEvents `source` attribute. Default `'tx-outbox'`. */
  readonly source?: string;
}

const DEFAULT_TIMEOUT_MS = 10_000;
const DEFAULT_CONCURRENCY = 64;
const DEFAULT_SOURCE = 'tx-outbox';
const BATCH_CONTENT_TYPE = 'application/cloudevents-batch+json';
const ERROR_BODY_CHARS = 200;
/** Bytes of a response body read to let the socket be reused; beyond this the body is cancelled. */
const MAX_DRAIN_BYTES = 64 * 1024;

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

interface ResolvedOptions {
  readonly resolve: EndpointResolver;
  readonly key: Buffer;
  readonly timeoutMs: number;
  readonly concurrency: number;
  readonly batchSize: number | undefined;
  readonly headers: Readonly<Record<string, string>>;
  readonly source: string;
}

function resolveOptions(options: WebhookPublisherOptions): ResolvedOptions {
  if (typeof options !== 'object' || options === null) {
    throw new OutboxValidationError('options', 'is missing', 'Call webhookPublisher({ endpoints, secret })');
  }
  const headers = staticHeaders(options.headers);
  return {
    resolve: endpointResolver(options.endpoints, headers),
    key: decodeSecret(options.secret),
    timeoutMs: positiveNumber('timeoutMs', options.timeoutMs, DEFAULT_TIMEOUT_MS),
    concurrency: positiveInteger('concurrency', options.concurrency, DEFAULT_CONCURRENCY),
    batchSize: batchSize(options.batch),
    headers,
    source: sourceOption(options.source),
  };
}

function positiveNumber(field: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new OutboxValidationError(
      field,
      `must be a positive number, got ${String(value)}`,
      omitForDefault(field, fallback),
    );
  }
  return value;
}

function positiveInteger(field: string, value: unknown, fallback: number | undefined): number {
  if (value === undefined && fallback !== undefined) return fallback;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    const fix = fallback === undefined ? `Pass an integer >= 1` : omitForDefault(field, fallback);
    throw new OutboxValidationError(field, `must be a positive integer, got ${String(value)}`, fix);
  }
  return value;
}

function omitForDefault(field: string, fallback: number): string {
  return `Pass a value > 0, or omit \`${field}\` for the default (${fallback})`;
}

function batchSize(batch: WebhookPublisherOptions['batch']): number | undefined {
  if (batch === undefined) return undefined;
  if (typeof batch !== 'object' || batch === null) {
    throw new OutboxValidationError(
      'batch',
      'must be an object',
      'Pass `batch: { maxSize: 100 }`, or omit it',
    );
  }
  return positiveInteger('batch.maxSize', batch.maxSize, undefined);
}

function staticHeaders(headers: WebhookPublisherOptions['headers']): Readonly<Record<string, string>> {
  if (headers === undefined) return {};
  const fix = "Pass a record of header names to string values, e.g. `headers: { authorization: 'Bearer …' }`";
  if (typeof headers !== 'object' || headers === null) {
    throw new OutboxValidationError('headers', 'must be an object', fix);
  }
  const copy: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (typeof value !== 'string') {
      throw new OutboxValidationError(`headers.${name}`, `must be a string, got ${typeof value}`, fix);
    }
    try {
      new Headers([[name, value]]);
    } catch {
      throw new OutboxValidationError(`headers.${name}`, 'is not a valid HTTP header name or value', fix);
    }
    copy[name] = value;
  }
  return copy;
}

function sourceOption(source: unknown): string {
  if (source === undefined) return DEFAULT_SOURCE;
  if (typeof source !== 'string' || source.length === 0) {
    throw new OutboxValidationError(
      'source',
      'must be a non-empty string',
      "Pass a CloudEvents source such as 'https://orders.example.com' or omit it (default 'tx-outbox')",
    );
  }
  return source;
}

// ---------------------------------------------------------------------------
// Abort plumbing and concurrency
// ---------------------------------------------------------------------------

type AbortCause = 'caller' | 'closed' | 'timeout';

/** Calls `listener` once when any signal aborts (immediately if one already did). Returns the unsubscriber. */
function onAnyAbort(signals: readonly AbortSignal[], listener: (index: number) => void): () => void {
  const handlers = signals.map((_, index) => () => listener(index));
  const already = signals.findIndex((signal) => signal.aborted);
  if (already >= 0) {
    listener(already);
    return () => {};
  }
  signals.forEach((signal, index) => {
    signal.addEventListener('abort', handlers[index]!, { once: true });
  });
  return () => {
    signals.forEach((signal, index) => {
      signal.removeEventListener('abort', handlers[index]!);
    });
  };
}

/** A per-request abort controller fed by the caller's signal, close() and the timeout. */
class RequestAbort {
  readonly #controller = new AbortController();
  readonly #timer: NodeJS.Timeout;
  readonly #unsubscribe: () => void;
  cause: AbortCause | undefined;

  constructor(caller: AbortSignal, closed: AbortSignal, timeoutMs: number) {
    this.#timer = setTimeout(() => this.#abort('timeout'), timeoutMs);
    this.#unsubscribe = onAnyAbort([caller, closed], (index) =>
      this.#abort(index === 0 ? 'caller' : 'closed'),
    );
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  dispose(): void {
    clearTimeout(this.#timer);
    this.#unsubscribe();
  }

  #abort(cause: AbortCause): void {
    if (this.cause !== undefined) return;
    this.cause = cause;
    this.#controller.abort();
  }
}

/** Takes one of `slots`; waiting stops (resolving false) when a signal aborts. */
async function acquireUnlessAborted(slots: Slots, signals: readonly AbortSignal[]): Promise<boolean> {
  if (signals.some((signal) => signal.aborted)) return false;
  let unsubscribe = (): void => {};
  const granted = await slots.acquire((cancel) => {
    unsubscribe = onAnyAbort(signals, cancel);
  });
  unsubscribe();
  return granted;
}

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/** One POST, before signing: the webhook-* and txo-* headers are added at send time. */
interface PreparedRequest {
  readonly endpoint: Endpoint;
  /** `webhook-id`: the event id in binary mode, so that it equals `ce-id`. */
  readonly webhookId: string;
  readonly body: Uint8Array;
  /** The headers that carry the event, all signed: ce-* attributes, content-type, the event's own headers. */
  readonly eventHeaders: Headers;
}

function singleRequest(
  message: OutboxMessage,
  endpoint: Endpoint,
  options: ResolvedOptions,
): PreparedRequest {
  return {
    endpoint,
    webhookId: message.eventId,
    body: message.payload,
    eventHeaders: eventHeaders(message, options.source),
  };
}

/**
 * The envelope, the event's own headers and content-type as HTTP headers. Names are
 * case-insensitive there: an event header `CE-Type` would join the envelope's `ce-type`
 * into one value (`x, order.created`); each attribute is set over it instead.
 */
function eventHeaders(message: OutboxMessage, source: string): Headers {
  const headers = new Headers();
  const fields = { ...envelopeHeaders(message, source), 'content-type': message.contentType };
  for (const [name, value] of Object.entries(fields)) headers.set(name, value);
  return headers;
}

/** Every event's attributes are in the (signed) body; of the headers only content-type says how to read it. */
function batchRequest(
  messages: readonly OutboxMessage[],
  endpoint: Endpoint,
  options: ResolvedOptions,
): PreparedRequest {
  const events = messages.map((message) => structuredEvent(message, options.source));
  return {
    endpoint,
    webhookId: `batch_${messages[0]!.eventId}`,
    body: Buffer.from(JSON.stringify(events), 'utf8'),
    eventHeaders: new Headers({ 'content-type': BATCH_CONTENT_TYPE }),
  };
}

const RESERVED_ATTRIBUTES = new Set(['data', 'data_base64']);

/**
 * A structured-mode CloudEvent: the same attributes as the binary-mode ce-*
 * headers (string values), plus user headers whose names are valid
 * CloudEvents attribute names (e.g. `traceparent`), plus the payload.
 */
function structuredEvent(message: OutboxMessage, source: string): Record<string, unknown> {
  const event: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(message.headers)) {
    const attribute = name.toLowerCase();
    if (/^[a-z0-9]+$/.test(attribute) && !RESERVED_ATTRIBUTES.has(attribute)) event[attribute] = value;
  }
  for (const [name, value] of Object.entries(envelopeHeaders(message, source))) {
    if (name.startsWith('ce-')) event[name.slice(3)] = value;
  }
  const json = message.contentType === 'application/json' ? parseJson(message.payload) : undefined;
  if (json === undefined) event['data_base64'] = Buffer.from(message.payload).toString('base64');
  else event['data'] = json.value;
  return event;
}

function parseJson(payload: Uint8Array): { value: unknown } | undefined {
  try {
    return { value: JSON.parse(Buffer.from(payload).toString('utf8')) };
  } catch {
    return undefined;
  }
}

/** The request's headers: the static ones, Basic authentication, then the event's and the signatures (these win). */
function requestHeaders(request: PreparedRequest, options: ResolvedOptions): Headers {
  const headers = new Headers(options.headers);
  if (request.endpoint.authorization !== undefined)
    headers.set('authorization', request.endpoint.authorization);
  for (const [name, value] of request.eventHeaders) headers.set(name, value);
  const signatures = signatureHeaders(options.key, request.webhookId, request.body, request.eventHeaders);
  for (const [name, value] of Object.entries(signatures)) headers.set(name, value);
  return headers;
}

/** Reads (a bounded part of) a response body so the socket can be reused; returns its start as text. */
async function drain(response: Response): Promise<string> {
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
function parseRetryAfter(value: string | null): number | undefined {
  if (value === null) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const date = Date.parse(trimmed);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

/** 3xx and 4xx are the receiver's final word, except 408 Request Timeout and 429 Too Many Requests. */
function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 429 || status >= 500;
}

function statusOutcome(response: Response, endpoint: Endpoint, body: string): PublishOutcome {
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

function abortOutcome(cause: AbortCause, endpoint: Endpoint, timeoutMs: number): PublishOutcome {
  const reasons: Record<AbortCause, string> = {
    caller: "was aborted by the caller's signal",
    closed: 'was aborted because the webhook publisher was closed',
    timeout: `timed out after ${timeoutMs} ms (option \`timeoutMs\`)`,
  };
  const error = new PublishError(`Webhook POST ${endpoint.label} ${reasons[cause]}`, { retryable: true });
  return failed(error, true);
}

/** A timed-out request's outcome as the endpoint being unreachable (no attempt charged). */
function silentOrigin(outcome: PublishOutcome, origin: string): PublishOutcome {
  if (outcome.ok) return outcome;
  const message = `${outcome.error.message}; no response from ${origin} since it was sent: the connection is in doubt`;
  return failed(
    new PublishError(message, { retryable: true, code: BROKER_UNAVAILABLE, cause: outcome.error }),
    true,
  );
}

/** Socket errors that mean the endpoint cannot be reached at all (no attempt is charged). */
const UNREACHABLE_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
]);

function networkOutcome(error: unknown, endpoint: Endpoint): PublishOutcome {
  const cause = error instanceof Error && error.cause instanceof Error ? error.cause : error;
  const code = (cause as { code?: unknown } | null)?.code;
  const detail = `${cause instanceof Error ? cause.message : String(cause)}${typeof code === 'string' ? ` (${code})` : ''}`;
  const unreachable = typeof code === 'string' && UNREACHABLE_CODES.has(code);
  return failed(
    new PublishError(`Webhook POST ${endpoint.label} failed: ${endpoint.scrub(detail)}`, {
      retryable: true,
      cause: error,
      code: unreachable ? BROKER_UNAVAILABLE : undefined,
    }),
    true,
  );
}

// ---------------------------------------------------------------------------
// The publisher
// ---------------------------------------------------------------------------

class WebhookPublisher implements Publisher {
  readonly name = 'webhook';
  readonly #options: ResolvedOptions;
  readonly #limiter: Slots;
  readonly #closing = new AbortController();
  readonly #inFlight = new Set<Promise<unknown>>();
  /** Responses heard per origin: tells a slow answer to one request from a silent endpoint. */
  readonly #heard = new Map<string, LinkActivity>();

  constructor(options: ResolvedOptions) {
    this.#options = options;
    this.#limiter = new Slots(options.concurrency);
    // Every request waiting for a slot or in flight listens on it: as many as a batch has.
    setMaxListeners(0, this.#closing.signal);
  }

  async publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (this.#closing.signal.aborted) {
      throw publisherClosed(
        'webhook',
        'publish() was called after close(). Create a new webhookPublisher to publish again.',
      );
    }
    const work = this.#publishAll(batch, signal);
    this.#inFlight.add(work);
    try {
      return await work;
    } finally {
      this.#inFlight.delete(work);
    }
  }

  async close(): Promise<void> {
    this.#closing.abort();
    await Promise.allSettled([...this.#inFlight]);
  }

  async #publishAll(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    const outcomes = new Array<PublishOutcome>(batch.length);
    const routed = new Map<string, { endpoint: Endpoint; indexes: number[] }>();
    batch.forEach((message, index) => {
      const endpoint = this.#options.resolve(message);
      if (endpoint instanceof PublishError) {
        outcomes[index] = failed(endpoint, false);
        return;
      }
      const route = routed.get(endpoint.key) ?? { endpoint, indexes: [] };
      route.indexes.push(index);
      routed.set(endpoint.key, route);
    });
    // One listener on the caller's signal per batch (not one per request, which would trip
    // Node's MaxListenersExceededWarning past 10); the requests listen on the batch's own signal.
    const batchAbort = new AbortController();
    setMaxListeners(0, batchAbort.signal);
    const unsubscribe = onAnyAbort([signal], () => batchAbort.abort(signal.reason));
    try {
      const sends: Promise<void>[] = [];
      for (const { endpoint, indexes } of routed.values()) {
        for (const group of this.#groups(indexes)) {
          const messages = group.map((index) => batch[index]!);
          const request = this.#prepare(messages, endpoint);
          sends.push(
            this.#send(request, batchAbort.signal).then((outcome) => {
              for (const index of group) outcomes[index] = outcome;
            }),
          );
        }
      }
      await Promise.all(sends);
      return outcomes;
    } finally {
      unsubscribe();
    }
  }

  #groups(indexes: readonly number[]): number[][] {
    const size = this.#options.batchSize ?? 1;
    const groups: number[][] = [];
    for (let start = 0; start < indexes.length; start += size)
      groups.push(indexes.slice(start, start + size));
    return groups;
  }

  #prepare(messages: readonly OutboxMessage[], endpoint: Endpoint): PreparedRequest | PublishOutcome {
    try {
      // Invalid header values of an event surface here (new Headers), as a permanent failure.
      if (this.#options.batchSize !== undefined) return batchRequest(messages, endpoint, this.#options);
      return singleRequest(messages[0]!, endpoint, this.#options);
    } catch (error) {
      const detail = endpoint.scrub(error instanceof Error ? error.message : String(error));
      const message = `Webhook POST ${endpoint.label} could not be built for event ${messages[0]!.eventId}: ${detail}`;
      return failed(new PublishError(message, { retryable: false, cause: error }), false);
    }
  }

  async #send(request: PreparedRequest | PublishOutcome, signal: AbortSignal): Promise<PublishOutcome> {
    if (!('endpoint' in request)) return request;
    const closing = this.#closing.signal;
    if (!(await acquireUnlessAborted(this.#limiter, [signal, closing]))) {
      return abortOutcome(signal.aborted ? 'caller' : 'closed', request.endpoint, this.#options.timeoutMs);
    }
    const abort = new RequestAbort(signal, closing, this.#options.timeoutMs);
    try {
      return await this.#post(request, abort);
    } finally {
      abort.dispose();
      this.#limiter.release();
    }
  }

  async #post(request: PreparedRequest, abort: RequestAbort): Promise<PublishOutcome> {
    const origin = request.endpoint.url.origin;
    let heard = this.#heard.get(origin);
    if (heard === undefined) {
      heard = new LinkActivity();
      this.#heard.set(origin, heard);
    }
    const mark = heard.mark();
    let response: Response;
    try {
      response = await fetch(request.endpoint.url, {
        method: 'POST',
        headers: requestHeaders(request, this.#options),
        body: request.body,
        redirect: 'manual',
        signal: abort.signal,
      });
    } catch (error) {
      if (abort.cause !== undefined) {
        const outcome = abortOutcome(abort.cause, request.endpoint, this.#options.timeoutMs);
        // No response from the origin since it was sent: the link (or the endpoint) is in doubt, as
        // with a 504, not this event's fault. One slower than others' answers is charged.
        return abort.cause === 'timeout' && heard.silentSince(mark) ? silentOrigin(outcome, origin) : outcome;
      }
      return networkOutcome(error, request.endpoint);
    }
    heard.heard();
    const body = await drain(response);
    return statusOutcome(response, request.endpoint, body);
  }
}

/**
 * Creates the webhook publisher (`name = 'webhook'`).
 *
 * Single mode (default): one POST per event. The body is the stored payload
 * bytes unchanged, `content-type` is the message's content type, the envelope
 * travels as CloudEvents binary-mode headers (`ce-id`, `ce-type`, `ce-source`,
 * `ce-specversion`, `ce-aggregatetype`, `ce-aggregateid`, `ce-sequence`,
 * `ce-schemaversion`, …, plus the message's own headers such as `traceparent`),
 * and the request is signed with Standard Webhooks: `webhook-id` = the event
 * id = `ce-id` (receivers dedup on it), `webhook-timestamp` = unix seconds,
 * `webhook-signature` = `v1,<base64 HMAC-SHA256>` (see {@link signWebhook}).
 * That signature covers id, timestamp and body only, so the headers carrying
 * the event are signed too: `txo-signed-headers` names them, `txo-signature`
 * signs them (see `webhook-signature.ts`); {@link verifyWebhookEvent} checks
 * both. Static `headers` (an API key …) are not part of the event and not signed.
 *
 * Batch mode (`batch: { maxSize }`): messages bound for the same URL are
 * POSTed together as a JSON array of structured CloudEvents
 * (`application/cloudevents-batch+json`); each element carries the envelope
 * attributes and `data` (the parsed JSON payload) or `data_base64` (bytes).
 * `webhook-id` is `batch_<eventId of the first element>` — deterministic for a
 * given batch, but a retried batch may contain different events, so receivers
 * should dedup on each element's `id`. The body, signed, carries every event's
 * attributes; `content-type` is signed as in single mode. The request's outcome
 * applies to every message in it.
 *
 * Addresses: a user name and password in an endpoint URL are sent as
 * `Authorization: Basic` (not in the URL); no error message, and so no log line
 * or `last_error`, shows them or a query value (`https://user:***@host/path?token=***`).
 *
 * Outcomes: 2xx = delivered; 3xx and 4xx other than 408/429 = permanent;
 * 408, 429, 5xx, network errors, timeouts and aborts = retryable, with
 * `retryAfterMs` from a `Retry-After` header (seconds or HTTP-date). A message
 * whose endpoint can't be resolved fails permanently. `publish` never throws
 * for a per-message failure; after `close()` it rejects with an OutboxError
 * (`TXO_PUBLISHER_CLOSED`). `close()` is idempotent and aborts in-flight
 * requests, which resolve as retryable failures.
 *
 * @throws OutboxValidationError when an option is invalid (names the option and the fix).
 */
export function webhookPublisher(options: WebhookPublisherOptions): Publisher {
  return new WebhookPublisher(resolveOptions(options));
}
