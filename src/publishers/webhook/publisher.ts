/**
 * Webhook publisher: POSTs each event to an HTTP endpoint, signed with
 * Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature`)
 * and carrying the envelope as the CloudEvents HTTP binding says — binary mode
 * (percent-encoded ce-* headers, payload bytes as the body) or, with `batch`,
 * batched mode (`application/cloudevents-batch+json`).
 *
 * Uses Node's global fetch (undici); no dependencies. The requests are built in
 * `request.ts`, their answers classified in `response.ts`; this file sends them: a slot of
 * the in-flight window, one CallAbort per request (the caller's signal, close(), `timeoutMs`).
 */

import { setMaxListeners } from 'node:events';
import type { OutboxMessage, Publisher, PublishOutcome } from '../contract.js';
import { CallAbort } from '../core/call-abort.js';
import { PublisherLifecycle } from '../core/lifecycle.js';
import { LinkActivity } from '../core/link-activity.js';
import { acquireSlot, Slots } from '../core/slots.js';
import {
  type ResolvedWebhookOptions,
  resolveWebhookOptions,
  type WebhookPublisherOptions,
} from './options.js';
import { isPreparedRequest, type PreparedRequest, planRequests, requestHeaders } from './request.js';
import { abortOutcome, drain, networkOutcome, silentOrigin, statusOutcome } from './response.js';

class WebhookPublisher implements Publisher {
  readonly name = 'webhook';
  readonly #options: ResolvedWebhookOptions;
  readonly #slots: Slots;
  readonly #lifecycle = new PublisherLifecycle('webhook');
  readonly #inFlight = new Set<Promise<unknown>>();
  /** Responses heard per origin: tells a slow answer to one request from a silent endpoint. */
  readonly #heard = new Map<string, LinkActivity>();

  constructor(options: ResolvedWebhookOptions) {
    this.#options = options;
    this.#slots = new Slots(options.maxInFlight);
    // Every request in flight listens on it: up to `maxInFlight`.
    setMaxListeners(0, this.#lifecycle.closing);
  }

  async publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    this.#lifecycle.assertOpen(
      'publish() was called after close(). Create a new webhookPublisher to publish again.',
    );
    const work = this.#publishAll(batch, signal);
    this.#inFlight.add(work);
    try {
      return await work;
    } finally {
      this.#inFlight.delete(work);
    }
  }

  close(): Promise<void> {
    return this.#lifecycle.close(async () => {
      await Promise.allSettled([...this.#inFlight]);
    });
  }

  async #publishAll(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    const { outcomes, posts } = planRequests(batch, this.#options);
    // One listener on the caller's signal per batch (not one per request, which would trip
    // Node's MaxListenersExceededWarning past 10); the requests listen on the batch's own signal.
    const caller = new CallAbort({ signal });
    setMaxListeners(0, caller.signal);
    // Waiting for a slot ends on the caller's signal or close(), not on the time limit.
    const waiting = new CallAbort({ signal: caller.signal, closing: this.#lifecycle.closing });
    try {
      await Promise.all(
        posts.map(async ({ indexes, request }) => {
          const outcome = isPreparedRequest(request)
            ? await this.#send(request, signal, caller.signal, waiting)
            : request;
          for (const index of indexes) outcomes[index] = outcome;
        }),
      );
      return outcomes;
    } finally {
      waiting.dispose();
      caller.dispose();
    }
  }

  async #send(
    request: PreparedRequest,
    signal: AbortSignal,
    batchSignal: AbortSignal,
    waiting: CallAbort,
  ): Promise<PublishOutcome> {
    if (!(await acquireSlot(this.#slots, waiting))) {
      return abortOutcome(signal.aborted ? 'caller' : 'closed', request.endpoint, this.#options.timeoutMs);
    }
    const abort = new CallAbort({
      signal: batchSignal,
      closing: this.#lifecycle.closing,
      timeoutMs: this.#options.timeoutMs,
    });
    try {
      return await this.#post(request, abort);
    } finally {
      abort.dispose();
      this.#slots.release();
    }
  }

  async #post(request: PreparedRequest, abort: CallAbort): Promise<PublishOutcome> {
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
 * Single mode (default): one POST per event, in the CloudEvents HTTP binding's
 * binary mode. The body is the stored payload bytes unchanged, `content-type` is
 * the message's content type (the `datacontenttype`, so no `ce-datacontenttype`:
 * §3.1.1), the other attributes travel as `ce-` headers (`ce-id`, `ce-type`,
 * `ce-source`, `ce-specversion`, `ce-time`, `ce-subject`, `ce-aggregatetype`,
 * `ce-aggregateid`, `ce-sequence` zero-padded, `ce-aggregatesequence`,
 * `ce-schemaversion`) with their values percent-encoded (§3.1.3.2: space, `"`,
 * `%` and everything outside visible ASCII as `%XX` of its UTF-8 bytes), so any
 * aggregate id arrives exactly; the message's own headers (`traceparent` …) go
 * first, as they are. The request is signed with Standard Webhooks: `webhook-id` = the event
 * id = `ce-id` (receivers dedup on it), `webhook-timestamp` = unix seconds,
 * `webhook-signature` = `v1,<base64 HMAC-SHA256>` (see {@link signWebhook}).
 * That signature covers id, timestamp and body only, so the headers carrying
 * the event are signed too, values as sent (percent-encoded):
 * `txo-signed-headers` names them, `txo-signature`
 * signs them (see `signature.ts`); {@link verifyWebhookEvent} checks
 * both. Static `headers` (an API key …) are not part of the event and not signed.
 *
 * Batch mode (`batch: { maxSize }`): messages bound for the same URL are
 * POSTed together as a JSON array of structured CloudEvents
 * (`application/cloudevents-batch+json`, the HTTP binding's batched mode §3.3);
 * each element carries the envelope attributes as plain strings (JSON needs no
 * encoding), the message's headers whose names are attribute names
 * (`traceparent`), and `data` (the parsed JSON payload) or `data_base64` (bytes).
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
  return new WebhookPublisher(resolveWebhookOptions(options));
}
