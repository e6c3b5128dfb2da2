import { type CloudEvent, HTTP } from 'cloudevents';
import { describe, expect, it } from 'vitest';
import { percentDecode } from '../../src/envelope/percent.js';
import { PublishError } from '../../src/errors.js';
import type { PublishOutcome } from '../../src/publishers/contract.js';
import { resolveWebhookOptions, type WebhookPublisherOptions } from '../../src/publishers/webhook/options.js';
import {
  BATCH_CONTENT_TYPE,
  isPreparedRequest,
  type PlannedPost,
  type PreparedRequest,
  planRequests,
  requestHeaders,
  structuredEvent,
} from '../../src/publishers/webhook/request.js';
import { verifyWebhookEvent } from '../../src/publishers/webhook/signature.js';
import { makeMessage } from '../helpers/messages.js';

const SECRET = `whsec_${Buffer.from('a-32-byte-secret-for-the-tests!!').toString('base64')}`;

function options(overrides: Partial<WebhookPublisherOptions> = {}) {
  return resolveWebhookOptions({
    endpoints: { a: 'https://a.example/in', b: 'https://b.example/in' },
    secret: SECRET,
    ...overrides,
  });
}

function prepared(post: PlannedPost | undefined): PreparedRequest {
  if (post === undefined || !isPreparedRequest(post.request)) throw new Error('expected a prepared request');
  return post.request;
}

function failure(outcome: PublishOutcome | undefined) {
  if (outcome === undefined || outcome.ok)
    throw new Error(`expected a failure, got ${JSON.stringify(outcome)}`);
  return outcome;
}

describe('planRequests — single mode', () => {
  it('makes one POST per message, endpoint by endpoint, and fails unroutable messages permanently', () => {
    const batch = [
      makeMessage({ topic: 'a' }),
      makeMessage({ topic: 'b' }),
      makeMessage({ topic: 'nowhere' }),
      makeMessage({ topic: 'a' }),
    ];
    const plan = planRequests(batch, options());

    expect(plan.posts.map((p) => p.indexes)).toEqual([[0], [3], [1]]);
    expect(plan.posts.map((p) => prepared(p).endpoint.url.host)).toEqual([
      'a.example',
      'a.example',
      'b.example',
    ]);
    const unroutable = failure(plan.outcomes[2]);
    expect(unroutable.retryable).toBe(false);
    expect(unroutable.error).toMatchObject({ code: 'TXO_WEBHOOK_NO_ENDPOINT' });
    expect(unroutable.error.message).toContain("topic 'nowhere'");
    expect([plan.outcomes[0], plan.outcomes[1], plan.outcomes[3]]).toEqual([undefined, undefined, undefined]);
  });

  it('sends the payload as the body and the envelope as ce-* headers; webhook-id is the event id', () => {
    const message = makeMessage({ topic: 'a', headers: { traceparent: 'tp', 'CE-Type': 'spoofed' } });
    const request = prepared(planRequests([message], options({ source: 'orders' })).posts[0]);

    expect(request.webhookId).toBe(message.eventId);
    expect(request.body).toBe(message.payload);
    const headers = Object.fromEntries(request.eventHeaders);
    expect(headers).toEqual({
      'content-type': 'application/json',
      'ce-specversion': '1.0',
      'ce-id': message.eventId,
      'ce-type': 'order.created',
      'ce-source': 'orders',
      'ce-time': message.createdAt.toISOString(),
      'ce-subject': message.aggregateId,
      'ce-aggregatetype': 'order',
      'ce-aggregateid': message.aggregateId,
      'ce-sequence': '0000000000000000001',
      'ce-aggregatesequence': '1',
      'ce-schemaversion': '1',
      traceparent: 'tp',
    });
  });

  it('follows the HTTP binding: percent-encoded ce-* values, content-type and no ce-datacontenttype', () => {
    // §3.1.3.2: space, '"', '%' and everything outside visible ASCII as %XX of the UTF-8 bytes.
    const message = makeMessage({
      topic: 'a',
      aggregateId: ' café 50% "日本" ',
      type: 'order.created/"v2"',
      sequence: 12,
      payload: new Uint8Array([1]),
      contentType: 'application/octet-stream',
      headers: { 'x-note': 'a "quoted" %41; value' },
    });
    const request = prepared(planRequests([message], options({ source: 'urn:x:a%20b' })).posts[0]);
    const headers = Object.fromEntries(request.eventHeaders);

    const id = '%20caf%C3%A9%2050%25%20%22%E6%97%A5%E6%9C%AC%22%20';
    expect(headers).toMatchObject({
      'content-type': 'application/octet-stream',
      'ce-aggregateid': id,
      'ce-subject': id,
      'ce-type': 'order.created/%22v2%22',
      'ce-source': 'urn:x:a%2520b',
      'ce-sequence': '0000000000000000012',
      'ce-aggregatesequence': '12',
      // The event's own headers are not attributes: sent as they are.
      'x-note': 'a "quoted" %41; value',
    });
    expect(headers).not.toHaveProperty('ce-datacontenttype');
    for (const value of Object.values(headers)) expect(value).toMatch(/^[\x20-\x7e]*$/);
    expect(percentDecode(headers['ce-aggregateid']!)).toBe(message.aggregateId);
  });

  it('turns an event header that HTTP refuses into a permanent outcome for that POST only', () => {
    const bad = makeMessage({ topic: 'a', headers: { 'x-bad': 'line\nbreak' } });
    const good = makeMessage({ topic: 'a' });
    const plan = planRequests([bad, good], options());

    const outcome = plan.posts[0]!.request as PublishOutcome;
    expect(isPreparedRequest(plan.posts[0]!.request)).toBe(false);
    expect(failure(outcome).retryable).toBe(false);
    expect(failure(outcome).error).toBeInstanceOf(PublishError);
    expect(failure(outcome).error.message).toContain(`could not be built for event ${bad.eventId}`);
    expect(isPreparedRequest(plan.posts[1]!.request)).toBe(true);
  });
});

describe('planRequests — batch mode', () => {
  it('groups each endpoint’s messages by maxSize into CloudEvents batches', () => {
    const batch = [
      makeMessage({ topic: 'a', json: { n: 1 } }),
      makeMessage({ topic: 'b' }),
      makeMessage({ topic: 'a', payload: new Uint8Array([1, 2]), contentType: 'application/octet-stream' }),
      makeMessage({ topic: 'a' }),
    ];
    const plan = planRequests(batch, options({ batch: { maxSize: 2 } }));

    expect(plan.posts.map((p) => p.indexes)).toEqual([[0, 2], [3], [1]]);
    const first = prepared(plan.posts[0]);
    expect(first.webhookId).toBe(`batch_${batch[0]!.eventId}`);
    expect(Object.fromEntries(first.eventHeaders)).toEqual({ 'content-type': BATCH_CONTENT_TYPE });
    const events = JSON.parse(Buffer.from(first.body).toString('utf8')) as Array<Record<string, unknown>>;
    expect(events.map((e) => e['id'])).toEqual([batch[0]!.eventId, batch[2]!.eventId]);
    expect(events[0]).toMatchObject({ data: { n: 1 }, source: 'tx-outbox' });
    expect(events[1]).toMatchObject({ data_base64: Buffer.from([1, 2]).toString('base64') });
  });

  it('writes the attributes as plain strings (JSON carries them, nothing percent-encoded) that the SDK reads', () => {
    const message = makeMessage({
      topic: 'a',
      aggregateId: ' café 50% "日本" ',
      type: 'order.created/"v2"',
      sequence: 12,
      json: { n: 1 },
      headers: { traceparent: 'tp', 'x-note': 'not an attribute name' },
    });
    const [post] = planRequests([message], options({ batch: { maxSize: 5 }, source: 'urn:x:a%20b' })).posts;
    const request = prepared(post);

    const [event] = JSON.parse(Buffer.from(request.body).toString('utf8')) as Array<Record<string, unknown>>;
    expect(event).toEqual({
      traceparent: 'tp',
      specversion: '1.0',
      id: message.eventId,
      source: 'urn:x:a%20b',
      type: 'order.created/"v2"',
      time: message.createdAt.toISOString(),
      subject: message.aggregateId,
      datacontenttype: 'application/json',
      aggregatetype: 'order',
      aggregateid: message.aggregateId,
      sequence: '0000000000000000012',
      aggregatesequence: '12',
      schemaversion: '1',
      // A header whose name is no attribute name travels in tx-outbox's extension.
      txoheaders: '{"x-note":"not an attribute name"}',
      data: { n: 1 },
    });
    // The official SDK's batched-mode reader (strict: extension names, source, time checked).
    const [read] = HTTP.toEvent({
      headers: Object.fromEntries(request.eventHeaders),
      body: Buffer.from(request.body).toString('utf8'),
    }) as CloudEvent<unknown>[];
    expect({ ...read }).toMatchObject({
      id: message.eventId,
      source: 'urn:x:a%20b',
      type: 'order.created/"v2"',
      subject: message.aggregateId,
      aggregateid: message.aggregateId,
      sequence: '0000000000000000012',
      data: { n: 1 },
    });
  });
});

describe('structuredEvent', () => {
  it('keeps headers named like CloudEvents attributes, never data or data_base64, and envelope wins', () => {
    const message = makeMessage({
      headers: { traceparent: 'tp', 'x-dash': 'no', data: 'no', type: 'spoofed' },
      contentType: 'application/json',
      payload: Buffer.from('not json'),
    });
    const event = structuredEvent(message, 'src');

    expect(event).toMatchObject({ traceparent: 'tp', type: 'order.created', source: 'src' });
    expect(event).not.toHaveProperty('x-dash');
    expect(event).not.toHaveProperty('data');
    expect(event['data_base64']).toBe(Buffer.from('not json').toString('base64'));
  });
});

describe('requestHeaders', () => {
  it('puts static headers first, Basic auth from the URL, then signs the event headers so they verify', () => {
    const resolved = resolveWebhookOptions({
      endpoints: 'https://user:pa55word@a.example/in',
      secret: SECRET,
      headers: { 'x-api-key': 'k', 'content-type': 'text/plain' },
    });
    const message = makeMessage();
    const request = prepared(planRequests([message], resolved).posts[0]);
    const headers = requestHeaders(request, resolved);

    expect(headers.get('x-api-key')).toBe('k');
    expect(headers.get('content-type')).toBe('application/json'); // the event's wins
    expect(headers.get('authorization')).toBe(`Basic ${Buffer.from('user:pa55word').toString('base64')}`);
    expect(headers.get('webhook-id')).toBe(message.eventId);
    const verdict = verifyWebhookEvent({ secret: SECRET, headers, body: request.body });
    expect(verdict.ok).toBe(true);
    if (verdict.ok) {
      expect(verdict.headers['ce-id']).toBe(message.eventId);
      expect(verdict.headers).not.toHaveProperty('x-api-key');
    }
  });
});
