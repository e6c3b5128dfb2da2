/**
 * The webhook receiver against an attacker who has seen signed requests and writes raw
 * HTTP on loopback (node:net, so header case, duplicates, folding and padding are as
 * sent, not as fetch would normalise them). Each request is signed as webhookPublisher
 * signs (envelopeHeaders(…, 'http') + signWebhookRequest), then altered; the real receiver checks it
 * against a real PostgreSQL inbox. Whatever the alteration, there is never a second or
 * different effect: one event id, its signed attributes, applied at most once.
 */
import { randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWebhookServer, type WebhookServer } from '../../src/consumers/webhook.js';
import { envelopeHeaders } from '../../src/envelope/bindings.js';
import { createInbox } from '../../src/inbox/inbox.js';
import { listQuarantine } from '../../src/inbox/quarantine.js';
import { signWebhookRequest, webhookPublisher } from '../../src/publishers/webhook/index.js';
import { structuredEvent } from '../../src/publishers/webhook/request.js';
import { previousEnvelopeHeaders } from '../../src/testing/envelopes.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { recordingHandler } from '../helpers/effects.js';
import { makeMessage } from '../helpers/messages.js';

const SECRET = `whsec_${Buffer.from('a-32-byte-secret-for-the-tests!!').toString('base64')}`;

type HeaderLines = Array<readonly [string, string]>;

interface Signed {
  readonly eventId: string;
  readonly lines: HeaderLines;
  readonly body: Buffer;
}

let db: TestDb;
let receiver: WebhookServer;
let port: number;
/** A receiver whose handler fails quoting a URL with a key: none of it may leave the receiver or reach a row. */
let failing: WebhookServer;
const API_KEY = 'k3y-of-the-receivers-own-api';
const { handler, seen: applied } = recordingHandler();

beforeAll(async () => {
  db = await createTestDb('webhook_receiver_adversarial');
  receiver = await createWebhookServer({
    inbox: createInbox({ pool: db.pool, consumer: 'adversarial', schema: db.schema }),
    handler,
    secret: SECRET,
    headersTimeoutMs: 1000,
    requestTimeoutMs: 2000,
  });
  port = Number(new URL(receiver.url).port);
  failing = await createWebhookServer({
    inbox: createInbox({ pool: db.pool, consumer: 'adversarial-failing', schema: db.schema, maxAttempts: 2 }),
    handler: async () => {
      throw new Error(`GET https://api.example.com/v1/stock?api_key=${API_KEY} failed: 500`);
    },
    secret: SECRET,
  });
});

afterAll(async () => {
  await failing?.close();
  await receiver?.close();
  await db?.close();
});

/** A request for a fresh event, signed as webhookPublisher signs it (`omit`: event headers left out of it). */
function signed(aggregateId: string, omit: readonly string[] = []): Signed {
  const message = makeMessage({ aggregateId, sequence: 1 });
  const event: Record<string, string> = envelopeHeaders(message, 'tx-outbox', 'http');
  for (const name of omit) delete event[name];
  const body = Buffer.from(message.payload);
  const signature = signWebhookRequest({ secret: SECRET, id: message.eventId, body, headers: event });
  return { eventId: message.eventId, lines: [...Object.entries(event), ...Object.entries(signature)], body };
}

/** Sends one request exactly as written; resolves with the status (0 when the connection closed without one). */
function raw(lines: HeaderLines, body: Buffer, head = ''): Promise<number> {
  return rawAnswer(lines, body, head).then((answer) => answer.status);
}

/** Like {@link raw}, with the whole answer. */
function rawAnswer(
  lines: HeaderLines,
  body: Buffer,
  head = '',
  to = port,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve) => {
    const socket = connect(to, '127.0.0.1');
    let received = '';
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('latin1');
    });
    socket.on('error', () => {});
    socket.on('close', () =>
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(received)?.[1] ?? 0), text: received }),
    );
    const text =
      head +
      `POST /events HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\ncontent-length: ${body.length}\r\n` +
      lines.map(([name, value]) => `${name}: ${value}\r\n`).join('') +
      '\r\n';
    // Not end(): a client that half-closes may lose its answer (node closes on the FIN).
    socket.write(Buffer.concat([Buffer.from(text, 'latin1'), body]));
  });
}

const effectsOf = (eventId: string) => applied.filter((a) => a.eventId === eventId);

/** The request's lines with `name` (case-insensitively) replaced by `value`, or removed. */
function swap(lines: HeaderLines, name: string, value?: string): HeaderLines {
  const out = lines.filter(([n]) => n.toLowerCase() !== name);
  return value === undefined ? out : [...out, [name, value]];
}

describe('webhook receiver under attack: raw requests', () => {
  it('applies the untouched request once; exact replays are duplicates', async () => {
    const r = signed('adv-plain');
    expect(await raw(r.lines, r.body)).toBe(204);
    expect(await raw(r.lines, r.body)).toBe(204);
    expect(await raw(r.lines, r.body)).toBe(204);
    expect(effectsOf(r.eventId)).toHaveLength(1);
  });

  it.each([
    ['ce-id', () => randomUUID()],
    ['ce-aggregateid', () => 'victim-order'],
    ['ce-type', () => 'order.refunded'],
    ['webhook-id', () => randomUUID()],
  ])('a second %s header (after or before the signed one) is refused', async (name, value) => {
    const r = signed(`adv-dup-${name}`);
    const after: HeaderLines = [...r.lines, [name, value()]];
    const before: HeaderLines = [[name, value()], ...r.lines];
    expect(await raw(after, r.body)).toBe(401);
    expect(await raw(before, r.body)).toBe(401);
    // The same value twice is not the signed value either.
    const original = r.lines.find(([n]) => n === name)![1];
    expect(await raw([...r.lines, [name, original]], r.body)).toBe(401);
    expect(effectsOf(r.eventId)).toHaveLength(0);
    expect(applied.some((a) => a.aggregateId === 'victim-order' || a.type === 'order.refunded')).toBe(false);
  });

  it('upper-case header names are the same headers: changing a value that way is refused', async () => {
    const r = signed('adv-case');
    expect(
      await raw(swap(r.lines, 'ce-aggregateid', undefined).concat([['CE-AGGREGATEID', 'victim']]), r.body),
    ).toBe(401);
    expect(await raw([...r.lines, ['Ce-AggregateId', 'victim']], r.body)).toBe(401);
    // Case alone changes nothing: the request is still the signed one, applied once.
    const upper = r.lines.map(([n, v]) => [n.toUpperCase(), v] as const);
    expect(await raw(upper, r.body)).toBe(204);
    expect(await raw(r.lines, r.body)).toBe(204);
    expect(effectsOf(r.eventId)).toHaveLength(1);
    expect(effectsOf(r.eventId)[0]!.aggregateId).toBe('adv-case');
  });

  it('a content-type sent before the signed one (node keeps the first) is refused', async () => {
    const r = signed('adv-ctype');
    expect(await raw([['content-type', 'application/cloudevents-batch+json'], ...r.lines], r.body)).toBe(401);
    expect(await raw([['content-type', 'text/plain'], ...r.lines], r.body)).toBe(401);
    expect(effectsOf(r.eventId)).toHaveLength(0);
  });

  it('two txo-signed-headers, or a junk second txo-signature, never change what is applied', async () => {
    const r = signed('adv-sigs');
    const list = r.lines.find(([n]) => n === 'txo-signed-headers')![1];
    expect(await raw([...r.lines, ['txo-signed-headers', list]], r.body)).toBe(401);
    const status = await raw([...r.lines, ['txo-signature', 'v1,AAAA']], r.body);
    expect([204, 401]).toContain(status);
    expect(await raw(r.lines, r.body)).toBe(204);
    expect(effectsOf(r.eventId)).toHaveLength(1);
  });

  it('a folded (obs-fold) header value is not accepted as a different value', async () => {
    const r = signed('adv-fold');
    const folded = r.lines.map(([n, v]) =>
      n === 'ce-aggregateid' ? ([n, `${v}\r\n victim`] as const) : ([n, v] as const),
    );
    expect([400, 401]).toContain(await raw(folded, r.body));
    expect(applied.some((a) => a.aggregateId.includes('victim'))).toBe(false);
    expect(effectsOf(r.eventId)).toHaveLength(0);
  });

  it('whitespace padding on a signed value yields at most the one signed effect', async () => {
    const r = signed('adv-pad');
    const pad = (extra: string) =>
      r.lines.map(([n, v]) =>
        n === 'ce-aggregateid' ? ([n, `${extra}${v}${extra}`] as const) : ([n, v] as const),
      );
    for (const extra of ['  ', '\t', '\u00a0']) expect([204, 401]).toContain(await raw(pad(extra), r.body));
    expect(await raw(r.lines, r.body)).toBe(204);
    expect(effectsOf(r.eventId)).toHaveLength(1);
    expect(effectsOf(r.eventId)[0]!.aggregateId).toBe('adv-pad');
  });

  it('a swapped or extended body is refused', async () => {
    const r = signed('adv-body');
    expect(await raw(r.lines, Buffer.from('{"n":666}'))).toBe(401);
    expect(await raw(r.lines, Buffer.concat([r.body, Buffer.from(' ')]))).toBe(401);
    expect(effectsOf(r.eventId)).toHaveLength(0);
  });

  it('an attribute the signer did not list is never read from an unsigned header', async () => {
    // A sender of its own that signs fewer headers: the receiver must not fill the gaps.
    // The sequence is in two attributes: ce-sequence (padded) and ce-aggregatesequence.
    const unlisted = [['ce-type'], ['ce-aggregateid'], ['ce-id'], ['ce-sequence', 'ce-aggregatesequence']];
    for (const missing of unlisted) {
      const r = signed(`adv-unlisted-${missing[0]}`, missing);
      const injected: HeaderLines = [
        ...r.lines,
        ...missing.map(
          (name) => [name, name === 'ce-id' ? r.eventId : name.includes('sequence') ? '1' : 'x'] as const,
        ),
      ];
      expect(await raw(injected, r.body)).toBe(400);
      expect(effectsOf(r.eventId)).toHaveLength(0);
    }
  });

  it('ce-schemaversion the signer did not list is not taken from an unsigned header: the event lacks it, refused', async () => {
    const r = signed('adv-unlisted-schema', ['ce-schemaversion']);
    const answer = await rawAnswer([...r.lines, ['ce-schemaversion', '9']], r.body);
    expect(answer.status).toBe(400);
    expect(answer.text).toContain('headers.ce-schemaversion: is missing');
    expect(effectsOf(r.eventId)).toHaveLength(0);
  });

  it('an attribute signed as two header lines (node joins them) is refused, not read as the joined value', async () => {
    // A sender holding the secret: fetch's Headers join the two values, and so does node:http.
    const message = makeMessage({ aggregateId: 'adv-two-lines', sequence: 1 });
    const event = envelopeHeaders(message, 'tx-outbox', 'http');
    const body = Buffer.from(message.payload);
    const headers = new Headers(event);
    headers.append('ce-type', 'order.cancelled');
    const signature = signWebhookRequest({ secret: SECRET, id: message.eventId, body, headers });
    const lines: HeaderLines = [
      ...Object.entries(event),
      ['ce-type', 'order.cancelled'],
      ...Object.entries(signature),
    ];
    const answer = await rawAnswer(lines, body);
    expect(answer.status).toBe(400);
    expect(answer.text).toContain('headers.ce-type: appears twice in the request');
    expect(effectsOf(message.eventId)).toHaveLength(0);
  });

  it('a timestamp outside the tolerance, in the past or the future, is refused even when correctly signed', async () => {
    for (const offsetS of [-3600, 3600, 10 ** 9]) {
      const message = makeMessage({ aggregateId: `adv-time-${offsetS}`, sequence: 1 });
      const event = envelopeHeaders(message, 'tx-outbox', 'http');
      const body = Buffer.from(message.payload);
      const signature = signWebhookRequest({
        secret: SECRET,
        id: message.eventId,
        body,
        headers: event,
        now: Date.now() + offsetS * 1000,
      });
      expect(await raw([...Object.entries(event), ...Object.entries(signature)], body)).toBe(401);
      expect(effectsOf(message.eventId)).toHaveLength(0);
    }
  });

  it('a header signature made with another secret is refused, though the body one is right', async () => {
    const r = signed('adv-other-key');
    const event = Object.fromEntries(r.lines.filter(([n]) => n.startsWith('ce-') || n === 'content-type'));
    const other = signWebhookRequest({
      secret: 'another-secret',
      id: r.eventId,
      body: r.body,
      headers: event,
    });
    const lines = swap(r.lines, 'txo-signature', other['txo-signature']);
    expect(await raw(lines, r.body)).toBe(401);
    expect(effectsOf(r.eventId)).toHaveLength(0);
  });

  it('a batch is read from its signed body only: taken whole or refused whole (400), each event once', async () => {
    const good = makeMessage({ aggregateId: 'adv-batch', sequence: 1 });
    const events = [structuredEvent(good, 'tx-outbox'), { id: randomUUID(), type: 'x', data: {} }];
    const post = (body: Buffer, id = `batch_${good.eventId}`) => {
      const event = { 'content-type': 'application/cloudevents-batch+json' };
      const signature = signWebhookRequest({ secret: SECRET, id, body, headers: event });
      return raw([...Object.entries(event), ...Object.entries(signature)], body);
    };
    // One element without an envelope: nothing of the batch is applied.
    expect(await post(Buffer.from(JSON.stringify(events)))).toBe(400);
    expect(effectsOf(good.eventId)).toHaveLength(0);
    expect(await post(Buffer.from('{"not":"an array"}'))).toBe(400);
    const whole = Buffer.from(JSON.stringify([events[0]]));
    expect(await post(whole)).toBe(204);
    expect(await post(whole)).toBe(204); // a replay: duplicates
    expect(effectsOf(good.eventId)).toHaveLength(1);
    expect(effectsOf(good.eventId)[0]!.aggregateId).toBe('adv-batch');
  });

  it('an unsigned ce-aggregatesequence cannot make the receiver percent-decode what 0.1 sent raw', async () => {
    // 0.1 sent the values as they are; its requests are told apart by the absence of a signed
    // ce-aggregatesequence. Adding one unsigned must not turn `a%20b` into `a b`.
    const message = makeMessage({ aggregateId: 'adv-0.1-a%20b', sequence: 1 });
    const event = { ...previousEnvelopeHeaders(message, 'tx-outbox'), 'content-type': message.contentType };
    const body = Buffer.from(message.payload);
    const signature = signWebhookRequest({ secret: SECRET, id: message.eventId, body, headers: event });
    const lines: HeaderLines = [
      ...Object.entries(event),
      ...Object.entries(signature),
      ['ce-aggregatesequence', '1'],
    ];
    expect(await raw(lines, body)).toBe(204);
    expect(effectsOf(message.eventId)).toHaveLength(1);
    expect(effectsOf(message.eventId)[0]!.aggregateId).toBe('adv-0.1-a%20b');
  });

  it('oversized headers and bodies are refused without effect, and the server keeps serving', async () => {
    const r = signed('adv-huge');
    expect(await raw([...r.lines, ['x-pad', 'a'.repeat(64 * 1024)]], r.body)).toBe(431);
    expect(await raw(r.lines, Buffer.alloc(2 * 1024 * 1024, 0x20))).toBe(413);
    expect(effectsOf(r.eventId)).toHaveLength(0);
    expect(await raw(r.lines, r.body)).toBe(204);
    expect(effectsOf(r.eventId)).toHaveLength(1);
  });

  it('a connection that sends nothing at all is closed within the headers timeout', async () => {
    const started = Date.now();
    const closedAfter = await new Promise<number>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.on('error', () => {});
      socket.resume(); // reading, or the server's FIN is never seen
      socket.on('close', () => resolve(Date.now() - started));
      setTimeout(() => socket.destroy(), 8000);
    });
    expect(closedAfter).toBeLessThan(4000);
  });

  it("a failing handler's error text is not sent back to the sender, nor stored with a URL's key", async () => {
    const r = signed('adv-handler-error');
    const first = await rawAnswer(r.lines, r.body, '', Number(new URL(failing.url).port));
    expect(first.status).toBe(503);
    expect(first.text).not.toContain(API_KEY);
    expect(first.text).not.toContain('api.example.com');
    const second = await rawAnswer(r.lines, r.body, '', Number(new URL(failing.url).port));
    expect(second.text).not.toContain(API_KEY);
    const { rows } = await db.pool.query<{ text: string }>(
      `SELECT last_reason AS text FROM ${db.schema}.inbox_attempts WHERE event_id = $1
       UNION ALL SELECT reason FROM ${db.schema}.inbox_quarantine WHERE event_id = $1`,
      [r.eventId],
    );
    expect(rows.length).toBeGreaterThan(0);
    for (const row of rows) {
      expect(row.text).toContain('api.example.com');
      expect(row.text).not.toContain(API_KEY);
    }
    // A row written before the redaction (or by hand) is shown redacted by `inbox list`.
    await db.pool.query(`UPDATE ${db.schema}.inbox_quarantine SET reason = $2 WHERE event_id = $1`, [
      r.eventId,
      `handler failed: GET https://api.example.com/?api_key=${API_KEY}`,
    ]);
    const listed = await listQuarantine(db.pool, { schema: db.schema, consumer: 'adversarial-failing' });
    const parked = listed.find((m) => m.eventId === r.eventId);
    expect(parked?.reason).toContain('api.example.com');
    expect(parked?.reason).not.toContain(API_KEY);
  });

  it('an event header differing only in case from an envelope attribute cannot change it', async () => {
    // An application forwarding headers of its own request into the event, say.
    const message = makeMessage({
      aggregateId: 'adv-header-case',
      sequence: 1,
      headers: { 'CE-Type': 'order.refunded', 'CE-AggregateId': 'victim-order', 'Content-Type': 'text/evil' },
    });
    const publisher = webhookPublisher({ endpoints: `${receiver.url}/events`, secret: SECRET });
    try {
      expect(await publisher.publish([message], new AbortController().signal)).toEqual([{ ok: true }]);
    } finally {
      await publisher.close();
    }
    expect(effectsOf(message.eventId)).toHaveLength(1);
    const [effect] = effectsOf(message.eventId);
    expect(effect).toMatchObject({ type: message.type, aggregateId: 'adv-header-case' });
    expect(effect!.headers['content-type']).toBe('application/json');
  });

  it('a replayed request padded with headers, all listed, is refused with no effect', async () => {
    // Within node's 16 KiB of headers: ~1100 short headers, every one named in txo-signed-headers.
    // What it costs the receiver is checked without a clock in test/unit/webhook-signature-cost.test.ts.
    const r = signed('adv-cpu');
    const names = Array.from({ length: 1100 }, (_, i) => `h${i.toString(36)}`);
    const padded: HeaderLines = [
      ...swap(r.lines, 'txo-signed-headers', names.join(' ')),
      ...names.map((name) => [name, ''] as const),
    ];
    for (let i = 0; i < 5; i++) expect(await raw(padded, r.body)).toBe(401);
    expect(effectsOf(r.eventId)).toHaveLength(0);
  });
});
