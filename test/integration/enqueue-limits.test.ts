/**
 * The largest events `enqueue` accepts are deliverable: every header set at the headers budget,
 * with the longest percent-encoded attributes, reaches a `node:http` server with its default
 * 16 KiB request-head limit (no 431); a non-ASCII `type` and `aggregateType` arrive exactly
 * through the webhook, NATS and RabbitMQ publishers.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, maxHeaderSize, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import type { ConsumeMessage } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWebhookServer, type WebhookServer } from '../../src/consumers/webhook.js';
import { percentDecode } from '../../src/envelope/percent.js';
import { OutboxValidationError } from '../../src/errors.js';
import { createInbox } from '../../src/inbox/inbox.js';
import { fromEnvelope } from '../../src/inbox/message.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import { headerCost, MAX_HEADERS_BYTES } from '../../src/producer/headers.js';
import type { Publisher } from '../../src/publishers/contract.js';
import { ensureStream, natsPublisher } from '../../src/publishers/nats/index.js';
import { rabbitmqPublisher } from '../../src/publishers/rabbitmq/index.js';
import { webhookPublisher } from '../../src/publishers/webhook/index.js';
import { createTestDb, inTransaction, type TestDb } from '../helpers/db.js';
import { recordingHandler } from '../helpers/effects.js';
import { NATS_URL } from '../helpers/env.js';
import {
  cleanup,
  closeAdmin,
  exchangeOf,
  newNamespace,
  openAdmin,
  RABBITMQ_URL,
  topicOf as rabbitTopic,
  readQueue,
  topology,
} from '../helpers/rabbitmq.js';
import { relayThrough as relayThroughDb } from '../helpers/relay-through.js';

let db: TestDb;
beforeAll(async () => {
  db = await createTestDb('enqueue_limits');
});
afterAll(async () => {
  await db?.close();
});

const relayThrough = (publisher: Publisher, events: OutboxEvent[]) => relayThroughDb(db, publisher, events);

/** 255 UTF-8 bytes, none of them plain: 765 characters percent-encoded, the most an attribute takes. */
const WIDEST = `${'😀'.repeat(63)}€`;
/** Names no rule reserves, in order: `h0`, `h1` … */
const name = (i: number, length: number): string => `h${i}`.padEnd(length, 'x');

/** Headers of `length`-character names and empty values, the last value filling the budget exactly. */
function filled(length: number, count = Number.POSITIVE_INFINITY): Record<string, string> {
  const headers: Record<string, string> = {};
  let used = 0;
  for (let i = 0; i < count && used + headerCost(name(i, length), '') <= MAX_HEADERS_BYTES; i++) {
    headers[name(i, length)] = '';
    used += headerCost(name(i, length), '');
  }
  const last = Object.keys(headers).at(-1)!;
  headers[last] = 'v'.repeat(MAX_HEADERS_BYTES - used);
  return headers;
}

const budgetOf = (headers: Record<string, string>): number =>
  Object.entries(headers).reduce((sum, [n, v]) => sum + headerCost(n, v), 0);

/** [what, headers at exactly MAX_HEADERS_BYTES] */
const LARGEST: Array<[string, Record<string, string>]> = [
  ['many tiny headers', filled(2)],
  ['a few huge values', filled(8, 3)],
  ['one header', filled(255, 1)],
  ['long names with empty values', filled(255)],
  ['252-character names with empty values', filled(252)],
];

describe('the largest header sets enqueue accepts', () => {
  const base = {
    aggregateType: WIDEST,
    aggregateId: WIDEST,
    type: '"'.repeat(255),
    topic: 'limits.largest',
    payload: { n: 1 },
  };

  it.each(LARGEST)('%s: at exactly the budget; one byte more is refused', async (_, headers) => {
    expect(budgetOf(headers)).toBe(MAX_HEADERS_BYTES);
    const last = Object.keys(headers).at(-1)!;
    const over = { ...headers, [last]: `${headers[last]}v` };
    const error = await inTransaction(db.pool, (tx) =>
      enqueue(tx, { ...base, headers: over }, { schema: db.schema }),
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).message).toMatch(/2 × name \+ value \+ 5/);
  });

  describe('are delivered to a node:http server with its default limits', () => {
    let server: Server;
    const received: Array<{ headBytes: number; headers: Record<string, string>; body: Buffer }> = [];
    beforeAll(async () => {
      server = createServer((req: IncomingMessage, res) => {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          const headers: Record<string, string> = {};
          let headBytes = `${req.method} ${req.url} HTTP/1.1\r\n`.length + 2;
          for (let i = 0; i < req.rawHeaders.length; i += 2) {
            headers[req.rawHeaders[i]!.toLowerCase()] = req.rawHeaders[i + 1]!;
            headBytes += req.rawHeaders[i]!.length + 2 + req.rawHeaders[i + 1]!.length + 2;
          }
          received.push({ headBytes, headers, body: Buffer.concat(chunks) });
          res.writeHead(204).end();
        });
      });
      // No options: Node's defaults, a 16 KiB request head and 2000 headers at most.
      expect(maxHeaderSize).toBe(16_384);
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    });
    afterAll(async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    });

    it('every largest set, with the widest id, aggregate type, type and source, arrives exactly', async () => {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
      const source = '%25'.repeat(85);
      await relayThrough(
        webhookPublisher({ endpoints: url, secret: 'a-test-secret', source }),
        LARGEST.map(([, headers]) => ({ ...base, headers })),
      );
      expect(received).toHaveLength(LARGEST.length);
      for (const [index, [, headers]] of LARGEST.entries()) {
        const got = received.find((r) => Object.keys(headers).every((n) => r.headers[n] === headers[n]));
        expect(got, `set ${index}`).toBeDefined();
        // Node's default limit is 16384 bytes; leave room for trace context (~600) and a proxy's additions.
        expect(got!.headBytes).toBeLessThan(16_384 - 1_024);
        for (const attribute of ['ce-aggregateid', 'ce-subject', 'ce-aggregatetype'])
          expect(percentDecode(got!.headers[attribute]!)).toBe(WIDEST);
        expect(percentDecode(got!.headers['ce-type']!)).toBe(base.type);
        expect(percentDecode(got!.headers['ce-source']!)).toBe(source);
        expect(JSON.parse(got!.body.toString('utf8'))).toEqual({ n: 1 });
      }
    });
  });
});

/** A CloudEvents `type` and `aggregateType` that are not ASCII, with inner spaces. */
const TYPE = 'commande créée 注文 😀 "v2" %41';
const AGGREGATE_TYPE = 'Bestellung Ä/ü';

describe('a non-ASCII type with an explicit topic arrives exactly', () => {
  it('through the webhook publisher into the webhook receiver (ce-type percent-encoded)', async () => {
    const secret = 'a-test-secret-for-the-receiver';
    const { handler, seen } = recordingHandler();
    const receiver: WebhookServer = await createWebhookServer({
      inbox: createInbox({ pool: db.pool, consumer: 'enqueue-limits', schema: db.schema }),
      handler,
      secret,
    });
    try {
      await relayThrough(webhookPublisher({ endpoints: `${receiver.url}/events`, secret }), [
        {
          aggregateType: AGGREGATE_TYPE,
          aggregateId: 'w-1',
          type: TYPE,
          topic: 'limits.webhook',
          payload: {},
        },
      ]);
      expect(seen.map((e) => e.type)).toEqual([TYPE]);
      expect(seen[0]!.headers['ce-aggregatetype']).toBe(AGGREGATE_TYPE);
    } finally {
      await receiver.close();
    }
  });

  it('through NATS (ce-type percent-encoded)', async () => {
    const suffix = randomUUID().slice(0, 8);
    const stream = `TXO_LIMITS_${suffix}`;
    const subject = `txo-limits-${suffix}.typed`;
    const nc: NatsConnection = await connect({ servers: NATS_URL });
    try {
      await ensureStream(nc, { name: stream, subjects: [subject] });
      await relayThrough(natsPublisher({ url: NATS_URL, stream }), [
        { aggregateType: AGGREGATE_TYPE, aggregateId: 'n-1', type: TYPE, topic: subject, payload: {} },
      ]);
      const consumer = await jetstream(nc).consumers.get(stream);
      const message = await consumer.next({ expires: 5_000 });
      expect(message).not.toBeNull();
      const headers: Record<string, string> = {};
      for (const [n, values] of message!.headers ?? []) headers[n] = values.join(',');
      expect(headers['ce-type']).not.toBe(TYPE);
      expect(percentDecode(headers['ce-type']!)).toBe(TYPE);
      expect(fromEnvelope(headers, message!.data)).toMatchObject({
        type: TYPE,
        aggregateType: AGGREGATE_TYPE,
      });
      await (await jetstreamManager(nc)).streams.delete(stream);
    } finally {
      await nc.close();
    }
  });

  it('through RabbitMQ (the AMQP type property and cloudEvents_type, UTF-8)', async () => {
    await openAdmin();
    const ns = newNamespace();
    try {
      await topology(ns);
      await relayThrough(rabbitmqPublisher({ url: RABBITMQ_URL, exchange: exchangeOf(ns) }), [
        {
          aggregateType: AGGREGATE_TYPE,
          aggregateId: 'r-1',
          type: TYPE,
          topic: rabbitTopic(ns),
          payload: {},
        },
        // The AMQP `type` is a short string: 255 bytes is its limit, and enqueue's.
        {
          aggregateType: AGGREGATE_TYPE,
          aggregateId: 'r-2',
          type: WIDEST,
          topic: rabbitTopic(ns),
          payload: {},
        },
      ]);
      const got: ConsumeMessage[] = await readQueue(ns, 2);
      expect(got.map((m) => m.properties.type)).toEqual([TYPE, WIDEST]);
      for (const [i, m] of got.entries()) {
        const headers: Record<string, string> = { 'content-type': m.properties.contentType as string };
        for (const [n, v] of Object.entries(m.properties.headers ?? {})) headers[n] = String(v);
        expect(headers['cloudEvents_type']).toBe([TYPE, WIDEST][i]);
        expect(fromEnvelope(headers, m.content)).toMatchObject({
          type: [TYPE, WIDEST][i],
          aggregateType: AGGREGATE_TYPE,
        });
      }
    } finally {
      await cleanup(ns);
      await closeAdmin();
    }
  });
});
