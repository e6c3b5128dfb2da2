/**
 * What `enqueue` accepts is deliverable: edge-but-valid names, headers and payloads go
 * through the relay and the real NATS and webhook publishers (and the webhook receiver) and
 * are read back unchanged.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type MsgHdrs, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeNats } from '../../src/consumers/nats.js';
import { createWebhookServer, type WebhookServer } from '../../src/consumers/webhook.js';
import { percentDecode } from '../../src/envelope/percent.js';
import { createInbox } from '../../src/inbox/inbox.js';
import { fromEnvelope } from '../../src/inbox/message.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import type { Publisher } from '../../src/publishers/contract.js';
import { ensureStream, natsPublisher } from '../../src/publishers/nats/index.js';
import { webhookPublisher } from '../../src/publishers/webhook/index.js';
import { AWKWARD_IDS } from '../../src/testing/envelopes.js';
import { createTestDb, type TestDb, waitFor } from '../helpers/db.js';
import { recordingHandler } from '../helpers/effects.js';
import { NATS_URL } from '../helpers/env.js';
import { relayThrough as relayThroughDb } from '../helpers/relay-through.js';

const suffix = randomUUID().slice(0, 8);
const ROOT = `txo-delivery-${suffix}`;
const STREAM = `TXO_DELIVERY_${suffix}`;

let db: TestDb;
let nc: NatsConnection;
beforeAll(async () => {
  db = await createTestDb('enqueue_delivery');
  nc = await connect({ servers: NATS_URL });
  await ensureStream(nc, { name: STREAM, subjects: [`${ROOT}.>`] });
});
afterAll(async () => {
  await (await jetstreamManager(nc)).streams.delete(STREAM).catch(() => false);
  await nc?.close();
  await db?.close();
});

/** Header values every transport carries unchanged: inner spaces, quotes, %, punctuation, empty. */
const HEADERS = {
  'x-note': 'a "quoted" value; with, commas % and  two spaces',
  'x-empty': '',
  'x-encoded': '%E2%82%AC 100%',
  "x-token!#$%&'*+.^_`|~": '(){}[]<>@\\/?=:',
};
const JSON_PAYLOAD = { text: 'été 😀 "q" \\ \\u0000 as text', clé: [1, -1.5, null, true], deep: { a: [{}] } };
const BYTES = Uint8Array.from({ length: 256 }, (_, i) => i);

const relayThrough = (publisher: Publisher, events: OutboxEvent[]) => relayThroughDb(db, publisher, events);

function natsHeaders(headers: MsgHdrs | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, values] of headers ?? []) out[name] = values.join(',');
  return out;
}

describe('through NATS JetStream', () => {
  it('a unicode aggregate id and subject, edge header values, JSON and bytes payloads arrive unchanged', async () => {
    const aggregateId = 'commande été-€-😀 日本/x:y%20"q"';
    const topic = `${ROOT}.commandes.été`;
    await relayThrough(natsPublisher({ url: NATS_URL, stream: STREAM }), [
      {
        aggregateType: 'order_line-item',
        aggregateId,
        type: 'order.created.v2',
        topic,
        payload: JSON_PAYLOAD,
        headers: HEADERS,
      },
      { aggregateType: 'order_line-item', aggregateId, type: 'order.file', topic, payload: BYTES },
    ]);
    const consumer = await jetstream(nc).consumers.get(STREAM);
    const got: Array<{ subject: string; headers: Record<string, string>; data: Uint8Array }> = [];
    for await (const m of await consumer.consume()) {
      got.push({ subject: m.subject, headers: natsHeaders(m.headers), data: m.data });
      if (got.length === 2) break;
    }
    expect(got.map((m) => m.subject)).toEqual([topic, topic]);
    // User headers verbatim; the attributes percent-encoded (NATS binding), decoded back exactly.
    expect(got[0]!.headers).toMatchObject(HEADERS);
    expect(got[0]!.headers['ce-aggregateid']).toBe(
      'commande%20%C3%A9t%C3%A9-%E2%82%AC-%F0%9F%98%80%20%E6%97%A5%E6%9C%AC/x:y%2520%22q%22',
    );
    const read = fromEnvelope(got[0]!.headers, got[0]!.data);
    expect(read).toMatchObject({ aggregateId, aggregateType: 'order_line-item', type: 'order.created.v2' });
    expect(read.headers['ce-subject']).toBe(aggregateId);
    expect(JSON.parse(Buffer.from(got[0]!.data).toString('utf8'))).toEqual(JSON_PAYLOAD);
    expect([...got[1]!.data]).toEqual([...BYTES]);
  });

  // 0.1 refused these ids at enqueue (edge whitespace), and its publisher trimmed header values.
  it.each(['pipeline', 'client'] as const)(
    'every awkward aggregate id arrives exactly as enqueued: enqueue, relay, NATS (%s mode), consumeNats, inbox',
    async (mode) => {
      const topic = `${ROOT}.awkward.${mode}`;
      await relayThrough(
        natsPublisher({ url: NATS_URL, stream: STREAM, mode }),
        AWKWARD_IDS.map((aggregateId) => ({
          aggregateType: `order_${mode}`, // aggregates of their own: sequence 1 in each mode
          aggregateId,
          type: 'order.created',
          topic,
          payload: { aggregateId },
        })),
      );
      const consumer = `awkward-${mode}`;
      const seen: Array<{ aggregateId: string; sequence: number; data: unknown }> = [];
      const nats = await consumeNats({
        inbox: createInbox({ pool: db.pool, consumer, schema: db.schema }),
        handler: async (_tx, event) => {
          seen.push({ aggregateId: event.aggregateId, sequence: event.sequence, data: event.data });
        },
        client: nc,
        stream: STREAM,
        durable: consumer,
        filterSubject: topic,
      });
      try {
        await waitFor(() => seen.length >= AWKWARD_IDS.length, {
          what: 'every awkward event handled',
          timeoutMs: 15_000,
        });
      } finally {
        await nats.stop();
      }
      expect(seen.map((e) => e.aggregateId).sort()).toEqual([...AWKWARD_IDS].sort());
      for (const e of seen)
        expect(e).toEqual({ aggregateId: e.aggregateId, sequence: 1, data: { aggregateId: e.aggregateId } });
    },
  );
});

describe('through the webhook publisher', () => {
  let server: Server;
  const received: Array<{ headers: IncomingHttpHeaders; body: Buffer }> = [];
  beforeAll(async () => {
    server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        received.push({ headers: req.headers, body: Buffer.concat(chunks) });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  });
  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
  });

  it('an ASCII aggregate id with spaces and punctuation, edge header values, JSON and bytes payloads arrive unchanged', async () => {
    const aggregateId = 'id with spaces/x:y%20"q"(1)';
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
    await relayThrough(webhookPublisher({ endpoints: url, secret: 'a-test-secret' }), [
      {
        aggregateType: 'order_line-item',
        aggregateId,
        type: 'order.created.v2',
        payload: JSON_PAYLOAD,
        headers: HEADERS,
      },
      { aggregateType: 'order_line-item', aggregateId, type: 'order.file', payload: BYTES },
    ]);
    expect(received).toHaveLength(2);
    const [json, bytes] = received;
    // Node lower-cases received header names. The event's own headers go as they are; the
    // attributes percent-encoded (HTTP binding §3.1.3.2).
    const expected = Object.fromEntries(Object.entries(HEADERS).map(([k, v]) => [k.toLowerCase(), v]));
    const encodedId = 'id%20with%20spaces/x:y%2520%22q%22(1)';
    expect(json!.headers).toMatchObject({
      ...expected,
      'ce-aggregateid': encodedId,
      'ce-subject': encodedId,
      'ce-type': 'order.created.v2',
      'content-type': 'application/json',
    });
    expect(percentDecode(json!.headers['ce-aggregateid'] as string)).toBe(aggregateId);
    expect(JSON.parse(json!.body.toString('utf8'))).toEqual(JSON_PAYLOAD);
    expect(bytes!.headers['content-type']).toBe('application/octet-stream');
    expect([...bytes!.body]).toEqual([...BYTES]);
  });

  describe('into the webhook receiver', () => {
    const SECRET = 'a-test-secret-for-the-receiver';
    // Every kind of id enqueue accepts: 0.1's publisher sent them raw, so fetch refused those
    // above U+00FF (the event went dead) and trimmed the edge spaces (a different aggregate).
    const IDS = [...AWKWARD_IDS, 'Ω-Ωmega', 'a  b', '%', '%%41'];
    let receiver: WebhookServer;
    const { handler, seen } = recordingHandler();
    beforeAll(async () => {
      receiver = await createWebhookServer({
        inbox: createInbox({ pool: db.pool, consumer: 'enqueue-delivery', schema: db.schema }),
        handler,
        secret: SECRET,
      });
    });
    afterAll(async () => {
      await receiver?.close();
    });

    it.each([
      ['binary mode', undefined],
      ['batch mode', { maxSize: 7 }],
    ] as const)(
      'every aggregate id enqueue accepts is delivered, and arrives exactly (%s)',
      async (_, batch) => {
        const type = `order.placed.${batch === undefined ? 'single' : 'batch'}`;
        const events: OutboxEvent[] = IDS.map((aggregateId) => ({
          aggregateType: 'order',
          aggregateId,
          type,
          payload: { aggregateId },
          headers: { 'x-note': 'a "quoted" %41; value' },
        }));
        const publisher = webhookPublisher({ endpoints: `${receiver.url}/events`, secret: SECRET, batch });
        await relayThrough(publisher, events);
        const got = seen.filter((e) => e.type === type);
        expect(got.map((e) => e.aggregateId).sort()).toEqual([...IDS].sort());
        for (const event of got) {
          expect(event.headers['ce-subject']).toBe(event.aggregateId);
          if (batch === undefined) expect(event.headers['x-note']).toBe('a "quoted" %41; value');
        }
      },
    );
  });
});
