import { randomBytes } from 'node:crypto';
import amqp, { type Channel, type ChannelModel, type Options } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Consumer, consumeRabbitMq } from '../../src/consumers/rabbitmq.js';
import { createInbox, type InboxHandler, type InboxOptions } from '../../src/inbox/inbox.js';
import type { InboxMessage } from '../../src/inbox/message.js';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';
import { rabbitmqPublisher } from '../../src/publishers/rabbitmq/index.js';
import { type Item, prepare } from '../../src/publishers/rabbitmq/wire.js';
import { AWKWARD_IDS, PREVIOUS_IDS } from '../../src/testing/envelopes.js';
import { createTestDb, type TestDb, waitFor } from '../helpers/db.js';
import { appliedEffects, createEffectsTable, effectsHandler } from '../helpers/effects.js';
import { makeMessage } from '../helpers/messages.js';
import { previousProperties } from '../helpers/rabbitmq.js';

const RABBITMQ_URL = process.env['RABBITMQ_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';
// Unique per run: test files run in parallel against one shared broker.
const ROOT = `txo-rmqcons-${randomBytes(4).toString('hex')}`;

let db: TestDb;
let conn: ChannelModel;
let admin: Channel;
const queues: string[] = [];
const publishers: Publisher[] = [];
const consumers: Consumer[] = [];
let counter = 0;

beforeAll(async () => {
  db = await createTestDb('rabbitmq_consumer');
  await createEffectsTable(db);
  conn = await amqp.connect(RABBITMQ_URL);
  admin = await conn.createChannel();
});

afterAll(async () => {
  await Promise.all(consumers.map((c) => c.stop()));
  await Promise.all(publishers.map((p) => p.close()));
  for (const q of queues) await admin?.deleteQueue(q).catch(() => undefined);
  await conn?.close().catch(() => undefined);
  await db?.close();
});

interface Setup {
  readonly queue: string;
  readonly consumerName: string;
  readonly publish: (...messages: OutboxMessage[]) => Promise<void>;
  readonly consume: (
    inbox?: Partial<InboxOptions>,
    extra?: { signal?: AbortSignal; prefetch?: number; concurrency?: number },
  ) => Promise<Consumer>;
  /** Puts a message on the queue as `format` writes it; `stripId`: without the id header, with the message-id. */
  readonly send: (message: OutboxMessage, format: Format, stripId?: boolean) => void;
  /** What the handler was handed, in the order applied. */
  readonly seen: InboxMessage[];
  readonly applied: () => Promise<Array<{ event_id: string; aggregate_id: string; sequence: number }>>;
  /** Ready + unacked messages in the queue. */
  readonly remaining: () => Promise<number>;
}

async function setup(queueArgs: Record<string, unknown> = {}): Promise<Setup> {
  counter += 1;
  const queue = `${ROOT}.q${counter}`;
  const consumerName = `rabbitmq-${ROOT}-${counter}`;
  await admin.assertQueue(queue, { durable: false, arguments: queueArgs });
  queues.push(queue);
  const publisher = rabbitmqPublisher({ url: RABBITMQ_URL, exchange: '', destination: () => queue });
  publishers.push(publisher);
  const effects = effectsHandler(db, consumerName);
  const seen: InboxMessage[] = [];
  const handler: InboxHandler = async (tx, event) => {
    await effects(tx, event);
    seen.push(event);
  };
  return {
    queue,
    consumerName,
    seen,
    send(message, format, stripId = false) {
      const { headers = {}, ...properties } = propertiesOf(message, format);
      if (stripId) {
        for (const name of ['cloudEvents_id', 'cloudEvents:id', 'ce-id']) delete headers[name];
        properties.messageId = message.eventId;
      }
      admin.sendToQueue(queue, Buffer.from(message.payload), { ...properties, headers });
    },
    async publish(...messages) {
      const outcomes = await publisher.publish(messages, new AbortController().signal);
      expect(outcomes.every((o) => o.ok)).toBe(true);
    },
    async consume(inbox = {}, extra = {}) {
      const consumer = await consumeRabbitMq({
        inbox: createInbox({ pool: db.pool, consumer: consumerName, schema: db.schema, ...inbox }),
        handler,
        url: RABBITMQ_URL,
        queue,
        concurrency: 4,
        deferMs: 100,
        ...extra,
      });
      consumers.push(consumer);
      return consumer;
    },
    applied: () => appliedEffects(db, consumerName),
    async remaining() {
      // A fresh channel: checkQueue on a channel only counts ready messages, so also
      // rely on `applied` + consumer stop in the tests for unacked ones.
      const { messageCount } = await admin.checkQueue(queue);
      return messageCount;
    },
  };
}

/**
 * How a message can arrive: as `rabbitmqPublisher` sends it (the AMQP binding, `cloudEvents_`
 * headers, datacontenttype in the content-type property), as another CloudEvents producer may
 * (the `cloudEvents:` separator, native AMQP types for time and the integer, no message-id), or
 * as tx-outbox 0.1 did (`ce-*` headers, values as they are, `ce-datacontenttype`).
 */
type Format = 'binding' | 'colon' | 'previous';
const FORMATS: readonly Format[] = ['binding', 'colon', 'previous'];
const SOURCE = 'urn:example:orders';

function propertiesOf(message: OutboxMessage, format: Format): Options.Publish {
  if (format === 'previous') return previousProperties(message, SOURCE);
  const wire = {
    exchange: '',
    destination: () => 'q',
    source: SOURCE,
    maxMessageBytes: Number.POSITIVE_INFINITY,
  };
  const { options } = prepare(message, wire) as Item;
  if (format === 'binding') return options;
  const headers: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(options.headers ?? {})) {
    headers[name.replace(/^cloudEvents_/, 'cloudEvents:')] = value;
  }
  headers['cloudEvents:time'] = { '!': 'timestamp', value: Math.floor(message.createdAt.getTime() / 1000) };
  headers['cloudEvents:aggregatesequence'] = message.sequence;
  const { messageId: _messageId, ...rest } = options;
  return { ...rest, headers };
}

/** A payload only `application/octet-stream` reads: as JSON it fails, so a lost content type shows. */
const BYTES = new Uint8Array([0xff, 0x00, 0x7b]);

/** Stops the consumer and checks nothing was left unacknowledged (it would be back in the queue). */
async function stopAndCount(consumer: Consumer, s: Setup): Promise<number> {
  await consumer.stop();
  await new Promise((r) => setTimeout(r, 100));
  return s.remaining();
}

describe('consumeRabbitMq', () => {
  it('rejects a message without an envelope to the dead-letter exchange', async () => {
    const dead = `${ROOT}.dead${counter + 1}`;
    await admin.assertQueue(dead, { durable: false });
    queues.push(dead);
    const s = await setup({ 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': dead });
    admin.sendToQueue(s.queue, Buffer.from('{}'), { headers: { foo: 'bar' } });
    await s.publish(makeMessage({ aggregateId: 'e', sequence: 1 }));
    const consumer = await s.consume();
    await waitFor(async () => (await s.applied()).length === 1, { what: 'the valid one applied' });
    await waitFor(async () => (await admin.checkQueue(dead)).messageCount === 1, { what: 'dead-lettered' });
    expect(await stopAndCount(consumer, s)).toBe(0);
  });

  it('deferred messages go to the tail: a prefetch window full of them does not hold back the rest', async () => {
    const s = await setup();
    // Four aggregates with a gap (sequence 2 never comes): each sequence 3 is deferred, again and again.
    const gaps = ['g1', 'g2', 'g3', 'g4'].flatMap((id) => [
      makeMessage({ aggregateId: id, sequence: 1 }),
      makeMessage({ aggregateId: id, sequence: 3 }),
    ]);
    const independent = Array.from({ length: 20 }, (_, i) =>
      makeMessage({ aggregateId: `i${i}`, sequence: 1 }),
    );
    await s.publish(...gaps, ...independent);
    // Requeued at the head, the deferred ones would fill the 2-message window on every redelivery.
    const consumer = await s.consume(
      { ordering: 'strict', maxDeferrals: 10_000 },
      { prefetch: 2, concurrency: 1 },
    );
    await waitFor(async () => (await s.applied()).length === 4 + 20, {
      what: 'the independent aggregates applied past the deferred messages',
    });
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM "${db.schema}".inbox_quarantine WHERE consumer = $1`,
      [s.consumerName],
    );
    expect(rows[0].n).toBe(0);
    // Stopping hands the deferred ones back to the queue: nothing lost.
    expect(await stopAndCount(consumer, s)).toBe(4);
  });

  it('reads every envelope on a queue: the AMQP binding, the cloudEvents: separator, tx-outbox 0.1; awkward ids exact', async () => {
    const s = await setup();
    const sent: OutboxMessage[] = [];
    for (const format of FORMATS) {
      const ids = format === 'previous' ? PREVIOUS_IDS : AWKWARD_IDS;
      for (const aggregateId of ids) {
        const m = makeMessage({
          aggregateType: `order_${format}`,
          aggregateId,
          sequence: 1,
          payload: BYTES,
          contentType: 'application/octet-stream',
          headers: {
            traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
            'x-note': 'a "b" %41',
          },
          createdAt: new Date('2026-12-01T10:11:12.000Z'),
        });
        s.send(m, format);
        sent.push(m);
      }
    }
    const consumer = await s.consume();
    await waitFor(() => s.seen.length === sent.length, { what: `${sent.length} events handled` });
    for (const m of sent) {
      const got = s.seen.find((e) => e.eventId === m.eventId);
      expect(got, `${m.aggregateType} ${JSON.stringify(m.aggregateId)}`).toMatchObject({
        type: m.type,
        aggregateType: m.aggregateType,
        aggregateId: m.aggregateId,
        sequence: 1,
        contentType: 'application/octet-stream',
      });
      expect(Buffer.from(got!.payload)).toEqual(Buffer.from(BYTES));
      expect(got!.headers).toMatchObject({
        traceparent: m.headers['traceparent'],
        'x-note': 'a "b" %41',
        'ce-source': SOURCE,
        'ce-subject': m.aggregateId,
        'ce-time': m.createdAt.toISOString(),
      });
    }
    expect(await stopAndCount(consumer, s)).toBe(0);
  });

  it('a deferred delivery goes to the tail with its envelope intact, in every format', async () => {
    const s = await setup();
    const message = (format: Format, sequence: number): OutboxMessage =>
      makeMessage({
        aggregateType: `order_${format}`,
        aggregateId: ' café 50%',
        sequence,
        payload: BYTES,
        contentType: 'application/octet-stream',
        headers: { 'x-note': 'kept' },
      });
    const consumer = await s.consume({ ordering: 'strict', maxDeferrals: 10_000 });
    // Sequence 2 first: strict ordering defers it until sequence 1 is applied.
    for (const format of FORMATS) s.send(message(format, 2), format);
    await new Promise((r) => setTimeout(r, 400)); // deferMs 100: each went round at least once
    expect(s.seen).toHaveLength(0);
    for (const format of FORMATS) s.send(message(format, 1), format);
    await waitFor(() => s.seen.length === 6, { what: 'six events applied' });
    for (const format of FORMATS) {
      const mine = s.seen.filter((e) => e.aggregateType === `order_${format}`);
      expect(
        mine.map((e) => e.sequence),
        format,
      ).toEqual([1, 2]);
      const deferred = mine[1]!;
      expect(Number(deferred.headers['x-txo-deferrals']), format).toBeGreaterThanOrEqual(1);
      expect(deferred, format).toMatchObject({
        aggregateId: ' café 50%',
        contentType: 'application/octet-stream',
      });
      expect(deferred.headers, format).toMatchObject({ 'x-note': 'kept', 'ce-source': SOURCE });
    }
    expect(await stopAndCount(consumer, s)).toBe(0);
  });

  it("the message-id stands in for an id header stripped on the way, in the envelope's own naming", async () => {
    const s = await setup();
    const sent = FORMATS.map((format) => {
      const m = makeMessage({ aggregateType: `order_${format}`, aggregateId: 'x 1', sequence: 1 });
      s.send(m, format, true);
      return m;
    });
    const consumer = await s.consume();
    await waitFor(() => s.seen.length === sent.length, { what: 'every event applied' });
    expect(s.seen.map((e) => e.eventId).sort()).toEqual(sent.map((m) => m.eventId).sort());
    expect(await stopAndCount(consumer, s)).toBe(0);
  });
});
