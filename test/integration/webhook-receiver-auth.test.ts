/**
 * The webhook receiver acts only on what is signed. Each test captures one request the
 * real webhookPublisher sends (as anyone on its path could), then replays it to the real
 * receiver with one attribute changed: every variant must be refused with 401 and have no
 * effect; the untouched request is applied once. A plain Standard Webhooks verifier (the
 * `standardwebhooks` package) still accepts the publisher's requests.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWebhookServer, type WebhookServer } from '../../src/consumers/webhook.js';
import { createInbox } from '../../src/inbox/inbox.js';
import type { OutboxMessage } from '../../src/publishers/contract.js';
import {
  signWebhookRequest,
  verifyWebhookEvent,
  webhookPublisher,
} from '../../src/publishers/webhook/index.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { recordingHandler } from '../helpers/effects.js';
import { makeMessage } from '../helpers/messages.js';

const SECRET = `whsec_${Buffer.from('a-32-byte-secret-for-the-tests!!').toString('base64')}`;

interface Captured {
  readonly headers: Record<string, string>;
  readonly body: Buffer;
}

let db: TestDb;
let receiver: WebhookServer;
const { handler, seen: handled } = recordingHandler();

beforeAll(async () => {
  db = await createTestDb('webhook_receiver_auth');
  receiver = await createWebhookServer({
    inbox: createInbox({ pool: db.pool, consumer: 'auth', schema: db.schema }),
    handler,
    secret: SECRET,
  });
});

afterAll(async () => {
  await receiver?.close();
  await db?.close();
});

/** The request webhookPublisher sends for `message`, as a server on its path sees it. */
async function capture(
  message: OutboxMessage,
  options: { batch?: { maxSize: number } } = {},
): Promise<Captured> {
  let captured: Captured | undefined;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      captured = { headers: plain(req.headers), body: Buffer.concat(chunks) };
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const publisher = webhookPublisher({
    endpoints: `http://127.0.0.1:${port}/events`,
    secret: SECRET,
    ...options,
  });
  try {
    expect(await publisher.publish([message], new AbortController().signal)).toEqual([{ ok: true }]);
  } finally {
    await publisher.close();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
  return captured!;
}

function plain(headers: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || ['host', 'connection', 'content-length'].includes(name)) continue;
    out[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return out;
}

async function replay(request: Captured, change: Record<string, string | undefined> = {}): Promise<number> {
  const headers = { ...request.headers, ...change };
  for (const [name, value] of Object.entries(change)) if (value === undefined) delete headers[name];
  const res = await fetch(`${receiver.url}/events`, {
    method: 'POST',
    headers: headers as Record<string, string>,
    body: request.body,
  });
  await res.arrayBuffer();
  return res.status;
}

const appliedIds = () => handled.map((h) => h.eventId);

describe('webhook receiver: only signed attributes count', () => {
  it('refuses a replay with a fresh ce-id (401, no effect), applies the original once', async () => {
    const m = makeMessage({ aggregateId: 'replay-id', sequence: 1 });
    const request = await capture(m);
    expect(await replay(request, { 'ce-id': randomUUID() })).toBe(401);
    expect(await replay(request, { 'ce-id': randomUUID() })).toBe(401);
    expect(appliedIds()).not.toContain(request.headers['ce-id']);
    expect(await replay(request)).toBe(204);
    expect(await replay(request)).toBe(204); // an exact replay is a duplicate
    expect(appliedIds().filter((id) => id === m.eventId)).toHaveLength(1);
    expect(handled.filter((h) => h.aggregateId === 'replay-id')).toHaveLength(1);
  });

  it.each([
    ['ce-type', 'order.cancelled'],
    ['ce-aggregateid', 'someone-elses-order'],
    ['ce-aggregatetype', 'invoice'],
    ['ce-sequence', '7'],
    ['ce-schemaversion', '2'],
    ['ce-source', 'https://evil.example'],
    ['content-type', 'text/plain'],
    ['traceparent', '00-11111111111111111111111111111111-2222222222222222-01'],
  ])('refuses a request whose %s was changed (401, no effect)', async (header, value) => {
    const m = makeMessage({
      aggregateId: `tamper-${header}`,
      sequence: 1,
      headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
    });
    const request = await capture(m);
    expect(request.headers[header]).toBeDefined();
    expect(await replay(request, { [header]: value })).toBe(401);
    expect(appliedIds()).not.toContain(m.eventId);
    expect(handled.some((h) => h.aggregateId === value)).toBe(false);
  });

  it('refuses a request stripped of its header signature, or with a shorter signed list (401)', async () => {
    const m = makeMessage({ aggregateId: 'strip', sequence: 1 });
    const request = await capture(m);
    expect(await replay(request, { 'txo-signature': undefined, 'txo-signed-headers': undefined })).toBe(401);
    const shorter = request.headers['txo-signed-headers']!.replace('ce-type ', '');
    expect(await replay(request, { 'txo-signed-headers': shorter })).toBe(401);
    expect(appliedIds()).not.toContain(m.eventId);
  });

  it('refuses a correctly signed request whose ce-id differs from webhook-id (401)', async () => {
    const body = '{"n":1}';
    const headers = {
      'content-type': 'application/json',
      'ce-id': randomUUID(),
      'ce-type': 'order.created',
      'ce-aggregatetype': 'order',
      'ce-aggregateid': 'mismatch',
      'ce-sequence': '1',
    };
    const signed = signWebhookRequest({ secret: SECRET, id: randomUUID(), body, headers });
    expect(await replay({ headers: { ...headers, ...signed }, body: Buffer.from(body) })).toBe(401);
    expect(handled.some((h) => h.aggregateId === 'mismatch')).toBe(false);
  });

  it('hands the handler the signed headers only, not ones added on the way', async () => {
    const m = makeMessage({ aggregateId: 'extra', sequence: 1 });
    const request = await capture(m);
    expect(await replay(request, { 'ce-extra': 'injected', 'x-forwarded-for': '10.0.0.1' })).toBe(204);
    const seen = handled.find((h) => h.eventId === m.eventId);
    expect(seen?.headers['ce-aggregateid']).toBe('extra');
    expect(seen?.headers['ce-extra']).toBeUndefined();
    expect(seen?.headers['x-forwarded-for']).toBeUndefined();
  });

  it('stays verifiable by the standardwebhooks package, in single and batch mode', async () => {
    const key = SECRET.slice('whsec_'.length);
    for (const options of [{}, { batch: { maxSize: 10 } }]) {
      const request = await capture(makeMessage({ aggregateId: 'std', sequence: 1 }), options);
      expect(() => new Webhook(key).verify(request.body, request.headers)).not.toThrow();
      const tampered = Buffer.concat([request.body, Buffer.from(' ')]);
      expect(() => new Webhook(key).verify(tampered, request.headers)).toThrow();
    }
  });

  it('batch mode: content-type is signed, the events are in the signed body', async () => {
    const request = await capture(makeMessage({ aggregateId: 'batch', sequence: 1 }), {
      batch: { maxSize: 10 },
    });
    const verdict = verifyWebhookEvent({ secret: SECRET, headers: request.headers, body: request.body });
    expect(verdict).toMatchObject({
      ok: true,
      headers: { 'content-type': 'application/cloudevents-batch+json' },
    });
    const changed = { ...request.headers, 'content-type': 'application/json' };
    expect(verifyWebhookEvent({ secret: SECRET, headers: changed, body: request.body }).ok).toBe(false);
  });
});
