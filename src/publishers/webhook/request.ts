/**
 * Building the webhook POSTs of a publish call: messages routed to their endpoint, grouped
 * (one per POST in single mode, up to `batch.maxSize` in batch mode), each group made into a
 * request and signed when it is sent. Single mode is the CloudEvents HTTP binding's binary
 * mode (`envelopeHeaders(…, 'http')`: `ce-` headers with percent-encoded values, the data
 * content type as `content-type` and no `ce-datacontenttype`, §3.1.1 and §3.1.3.2); batch
 * mode its batched mode (§3.3, `application/cloudevents-batch+json`), each event in the JSON
 * format with its attributes as plain strings.
 */

import { envelopeHeaders, structuredAttributes } from '../../envelope/bindings.js';
import { PublishError } from '../../errors.js';
import { failed, type OutboxMessage, type PublishOutcome } from '../contract.js';
import type { Endpoint } from './endpoints.js';
import type { ResolvedWebhookOptions } from './options.js';
import { signatureHeaders } from './signature.js';

export const BATCH_CONTENT_TYPE = 'application/cloudevents-batch+json';

/** One POST, before signing: the webhook-* and txo-* headers are added at send time. */
export interface PreparedRequest {
  readonly endpoint: Endpoint;
  /** `webhook-id`: the event id in binary mode, so that it equals `ce-id`. */
  readonly webhookId: string;
  readonly body: Uint8Array;
  /**
   * The headers that carry the event, all signed, values as sent (percent-encoded): ce-*
   * attributes, content-type, the event's own headers.
   */
  readonly eventHeaders: Headers;
}

/** One POST to make, or the outcome that stands for it when it could not be built. */
export interface PlannedPost {
  /** The positions in the batch of the messages it carries; its outcome is theirs. */
  readonly indexes: readonly number[];
  readonly request: PreparedRequest | PublishOutcome;
}

export interface RequestPlan {
  /** Sparse: only the outcomes of messages without an endpoint (permanent failures) are set. */
  readonly outcomes: PublishOutcome[];
  /** In the order the endpoints first appear in the batch, each endpoint's groups in batch order. */
  readonly posts: readonly PlannedPost[];
}

type PlanOptions = Pick<ResolvedWebhookOptions, 'resolve' | 'batchSize' | 'source'>;

/** Routes `batch` to its endpoints and builds the POSTs; a message without an endpoint fails permanently. */
export function planRequests(batch: readonly OutboxMessage[], options: PlanOptions): RequestPlan {
  const outcomes = new Array<PublishOutcome>(batch.length);
  const routed = new Map<string, { endpoint: Endpoint; indexes: number[] }>();
  batch.forEach((message, index) => {
    const endpoint = options.resolve(message);
    if (endpoint instanceof PublishError) {
      outcomes[index] = failed(endpoint, false);
      return;
    }
    const route = routed.get(endpoint.key) ?? { endpoint, indexes: [] };
    route.indexes.push(index);
    routed.set(endpoint.key, route);
  });
  const posts: PlannedPost[] = [];
  for (const { endpoint, indexes } of routed.values()) {
    for (const group of groups(indexes, options.batchSize ?? 1)) {
      const messages = group.map((index) => batch[index]!);
      posts.push({ indexes: group, request: prepareRequest(messages, endpoint, options) });
    }
  }
  return { outcomes, posts };
}

function groups(indexes: readonly number[], size: number): number[][] {
  const out: number[][] = [];
  for (let start = 0; start < indexes.length; start += size) out.push(indexes.slice(start, start + size));
  return out;
}

/** The request for `messages` (one in single mode); a failure to build it is a permanent outcome. */
export function prepareRequest(
  messages: readonly OutboxMessage[],
  endpoint: Endpoint,
  options: Pick<ResolvedWebhookOptions, 'batchSize' | 'source'>,
): PreparedRequest | PublishOutcome {
  try {
    // Invalid header values of an event surface here (new Headers), as a permanent failure.
    if (options.batchSize !== undefined) return batchRequest(messages, endpoint, options.source);
    return singleRequest(messages[0]!, endpoint, options.source);
  } catch (error) {
    const detail = endpoint.scrub(error instanceof Error ? error.message : String(error));
    const message = `Webhook POST ${endpoint.label} could not be built for event ${messages[0]!.eventId}: ${detail}`;
    return failed(new PublishError(message, { retryable: false, cause: error }), false);
  }
}

export function isPreparedRequest(request: PreparedRequest | PublishOutcome): request is PreparedRequest {
  return 'endpoint' in request;
}

function singleRequest(message: OutboxMessage, endpoint: Endpoint, source: string): PreparedRequest {
  return {
    endpoint,
    webhookId: message.eventId,
    body: message.payload,
    eventHeaders: eventHeaders(message, source),
  };
}

/**
 * The event's own headers, the envelope and content-type as HTTP headers. Names are
 * case-insensitive there: an event header `CE-Type` would join the envelope's `ce-type`
 * into one value (`x, order.created`); each attribute is set over it instead.
 */
function eventHeaders(message: OutboxMessage, source: string): Headers {
  const headers = new Headers();
  const fields = envelopeHeaders(message, source, 'http');
  for (const name in fields) headers.set(name, fields[name]!);
  return headers;
}

/** Every event's attributes are in the (signed) body; of the headers only content-type says how to read it. */
function batchRequest(
  messages: readonly OutboxMessage[],
  endpoint: Endpoint,
  source: string,
): PreparedRequest {
  const events = messages.map((message) => structuredEvent(message, source));
  return {
    endpoint,
    webhookId: `batch_${messages[0]!.eventId}`,
    body: Buffer.from(JSON.stringify(events), 'utf8'),
    eventHeaders: new Headers({ 'content-type': BATCH_CONTENT_TYPE }),
  };
}

/**
 * A structured-mode CloudEvent (the JSON event format): the attributes as plain strings
 * (`structuredAttributes`: JSON carries any string, nothing is percent-encoded), plus the
 * payload as `data` (JSON) or `data_base64` (anything else, or JSON that does not parse).
 */
export function structuredEvent(message: OutboxMessage, source: string): Record<string, unknown> {
  const event: Record<string, unknown> = structuredAttributes(message, source);
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
export function requestHeaders(
  request: PreparedRequest,
  options: Pick<ResolvedWebhookOptions, 'headers' | 'key'>,
): Headers {
  const headers = new Headers(options.headers);
  if (request.endpoint.authorization !== undefined)
    headers.set('authorization', request.endpoint.authorization);
  for (const [name, value] of request.eventHeaders) headers.set(name, value);
  const signatures = signatureHeaders(options.key, request.webhookId, request.body, request.eventHeaders);
  for (const [name, value] of Object.entries(signatures)) headers.set(name, value);
  return headers;
}
