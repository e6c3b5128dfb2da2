/**
 * One trace per event: the caller's command span → enqueue in its transaction → the relay's
 * `publish` span → the broker → the consumer adapter → the inbox's `process` span → the handler's
 * own span, all under one trace id, against real PostgreSQL, relay and brokers. Without a tracer
 * provider nothing is started and the headers go out as they were stored.
 */
import { randomBytes } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { context, propagation, type Span, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { Admin } from '@platformatic/kafka';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Consumer } from '../../src/consumers/consumer.js';
import { consumeKafka } from '../../src/consumers/kafka/index.js';
import { consumeNats } from '../../src/consumers/nats.js';
import { createInbox, type Inbox, type InboxHandler } from '../../src/inbox/inbox.js';
import type { InboxMessage } from '../../src/inbox/message.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { Publisher } from '../../src/publishers/contract.js';
import { kafkaPublisher } from '../../src/publishers/kafka/index.js';
import { ensureStream, natsPublisher } from '../../src/publishers/nats/index.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { NATS_URL } from '../helpers/env.js';
import { KAFKA_BROKER, kafkaAvailable } from '../helpers/kafka.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

const kafkaUp = await kafkaAvailable('tracing.test.ts (Kafka):');
const suffix = randomBytes(4).toString('hex');
// A new exporter per test: shutting the provider down stops its exporter.
let exporter = new InMemorySpanExporter();
let provider: BasicTracerProvider | undefined;
let db: TestDb;
let nc: NatsConnection;

/** Registers an SDK as an application would: provider, context manager, W3C propagator. */
function registerSdk(): void {
  exporter = new InMemorySpanExporter();
  provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
}

beforeAll(async () => {
  db = await createTestDb('tracing');
  nc = await connect({ servers: NATS_URL });
});
afterAll(async () => {
  await nc?.close();
  await db?.close();
});
afterEach(async () => {
  trace.disable();
  context.disable();
  propagation.disable();
  await provider?.shutdown();
  provider = undefined;
  exporter.reset();
});

const tracer = () => trace.getTracer('test');

/** The caller's command: a span around the transaction that enqueues the event. */
async function command(topic: string, aggregateId: string): Promise<void> {
  await tracer().startActiveSpan('command', async (span) => {
    try {
      await inTransaction(db.pool, (tx) =>
        enqueue(
          tx,
          { aggregateType: 'order', aggregateId, type: 'order.placed', topic, payload: { id: aggregateId } },
          { schema: db.schema },
        ),
      );
    } finally {
      span.end();
    }
  });
}

/** The handler's own work: a span, which should nest under the inbox's process span. */
function spanningHandler(seen: InboxMessage[] | string[]): InboxHandler {
  return async (tx, event) => {
    await tracer().startActiveSpan('handler', async (span) => {
      await tx.query('SELECT 1');
      (seen as string[]).push(event.eventId);
      span.end();
    });
  };
}

/** Runs a relay with `publisher` until `done`, then stops it (closing the publisher). */
async function relayUntil(publisher: Publisher, done: () => boolean, what: string): Promise<void> {
  const relay = createRelay({
    pool: db.pool,
    publisher,
    schema: db.schema,
    pollIntervalMs: 50,
    backoff: { baseMs: 10, capMs: 20 },
  });
  await relay.start();
  try {
    await waitFor(done, { what, timeoutMs: 30_000 });
  } finally {
    await relay.stop({ timeout: 2000 });
  }
}

const byName = (spans: readonly ReadableSpan[], name: string): ReadableSpan => {
  const found = spans.filter((s) => s.name === name);
  expect(found, `one span named ${name} in ${spans.map((s) => s.name).join(', ')}`).toHaveLength(1);
  return found[0]!;
};

/** Asserts command ← publish ← process ← handler, one trace id, kinds and attributes. */
function expectOneTrace(system: string, destination: string, consumer: string): void {
  const spans = exporter.getFinishedSpans();
  const commandSpan = byName(spans, 'command');
  const publish = byName(spans, `publish ${destination}`);
  const processSpan = byName(spans, `process ${destination}`);
  const handler = byName(spans, 'handler');
  const traceId = commandSpan.spanContext().traceId;
  for (const s of [publish, processSpan, handler]) expect(s.spanContext().traceId).toBe(traceId);
  // TXO_PRINT_TRACE=1 prints the tree (docs/tracing.md shows one).
  if (process.env['TXO_PRINT_TRACE'] === '1') {
    const kinds = ['INTERNAL', 'SERVER', 'CLIENT', 'PRODUCER', 'CONSUMER'];
    const lines = [commandSpan, publish, processSpan, handler].map(
      (s, depth) =>
        `${'  '.repeat(depth)}${s.name} [${kinds[s.kind]}] span ${s.spanContext().spanId} parent ${s.parentSpanContext?.spanId ?? '-'} ${JSON.stringify(s.attributes)}`,
    );
    console.log(`trace ${traceId}\n${lines.join('\n')}`);
  }
  expect(publish.parentSpanContext?.spanId).toBe(commandSpan.spanContext().spanId);
  expect(processSpan.parentSpanContext?.spanId).toBe(publish.spanContext().spanId);
  expect(handler.parentSpanContext?.spanId).toBe(processSpan.spanContext().spanId);
  expect(processSpan.links.map((l) => l.context.spanId)).toEqual([publish.spanContext().spanId]);

  expect(publish.kind).toBe(SpanKind.PRODUCER);
  expect(processSpan.kind).toBe(SpanKind.CONSUMER);
  const eventId = processSpan.attributes['messaging.message.id'];
  expect(eventId).toMatch(/^[0-9a-f-]{36}$/);
  expect(publish.attributes).toMatchObject({
    'messaging.system': system,
    'messaging.destination.name': destination,
    'messaging.message.id': eventId,
    'messaging.operation.type': 'send',
    'messaging.operation.name': 'publish',
  });
  expect(processSpan.attributes).toMatchObject({
    'messaging.system': system,
    'messaging.destination.name': destination,
    'messaging.consumer.group.name': consumer,
    'messaging.operation.type': 'process',
    'tx_outbox.inbox.status': 'processed',
  });
  expect(publish.status.code).toBe(SpanStatusCode.UNSET);
  expect(processSpan.status.code).toBe(SpanStatusCode.UNSET);
}

describe('tracing through NATS', () => {
  it('one trace: command ← publish ← process ← handler', async () => {
    registerSdk();
    const ns = `txotr${suffix}`;
    const stream = `TXO_TRACE_${suffix}`;
    const topic = `${ns}.orders`;
    await ensureStream(nc, { name: stream, subjects: [`${ns}.>`] });
    const consumerName = `trace-nats-${suffix}`;
    const seen: string[] = [];
    const inbox = createInbox({ pool: db.pool, consumer: consumerName, schema: db.schema });
    const consumer = await consumeNats({
      inbox,
      handler: spanningHandler(seen),
      url: NATS_URL,
      stream,
      durable: consumerName,
    });
    try {
      await command(topic, 'n-1');
      await relayUntil(natsPublisher({ url: NATS_URL, stream }), () => seen.length === 1, 'handled');
    } finally {
      await consumer.stop();
      await (await jetstreamManager(nc)).streams.delete(stream).catch(() => undefined);
    }
    expectOneTrace('nats', topic, consumerName);
  }, 60_000);
});

describe.skipIf(!kafkaUp)('tracing through Kafka', () => {
  it('one trace: command ← publish ← process ← handler', async () => {
    registerSdk();
    const topic = `txo-trace-${suffix}`;
    const admin = new Admin({ clientId: 'txo-trace-test', bootstrapBrokers: [KAFKA_BROKER] });
    await admin.createTopics({ topics: [topic], partitions: 1, replicas: 1 });
    const consumerName = `trace-kafka-${suffix}`;
    const seen: string[] = [];
    let consumer: Consumer | undefined;
    try {
      consumer = await consumeKafka({
        inbox: createInbox({ pool: db.pool, consumer: consumerName, schema: db.schema }),
        handler: spanningHandler(seen),
        url: [KAFKA_BROKER],
        topic,
        group: topic,
      });
      await command(topic, 'k-1');
      const publisher = kafkaPublisher({ url: [KAFKA_BROKER], clientId: 'txo-trace-test' });
      await relayUntil(publisher, () => seen.length === 1, 'handled');
    } finally {
      await consumer?.stop();
      await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
      await admin.close();
    }
    expectOneTrace('kafka', topic, consumerName);
  }, 90_000);
});

describe('tracing in the relay and the inbox', () => {
  const stored = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

  async function enqueueWithTraceparent(aggregateId: string): Promise<void> {
    await inTransaction(db.pool, (tx) =>
      enqueue(
        tx,
        {
          aggregateType: 'order',
          aggregateId,
          type: 'order.placed',
          payload: {},
          headers: { traceparent: stored, tracestate: 'vendor=1', 'x-mine': 'kept' },
        },
        { schema: db.schema },
      ),
    );
  }

  it('no tracer provider: the headers go out as stored, no span', async () => {
    await enqueueWithTraceparent(`plain-${suffix}`);
    const publisher = new RecordingPublisher();
    await relayUntil(publisher, () => publisher.received.length === 1, 'published');
    expect(publisher.received[0]!.headers).toEqual({
      traceparent: stored,
      tracestate: 'vendor=1',
      'x-mine': 'kept',
    });
    expect(exporter.getFinishedSpans()).toEqual([]);
  });

  it('a failed publish: the span has an error status and the exception, its secret redacted', async () => {
    registerSdk();
    await enqueueWithTraceparent(`fail-${suffix}`);
    const publisher = new RecordingPublisher();
    let calls = 0;
    publisher.verdict = () =>
      calls++ === 0
        ? { ok: false, retryable: true, error: new Error('refused by nats://user:hunter2@broker:4222') }
        : { ok: true };
    await relayUntil(publisher, () => publisher.received.length === 1, 'published on the retry');
    const spans = exporter.getFinishedSpans().filter((s) => s.name.startsWith('publish '));
    expect(spans).toHaveLength(2);
    const [failed, delivered] = spans as [ReadableSpan, ReadableSpan];
    expect(failed.status.code).toBe(SpanStatusCode.ERROR);
    expect(failed.status.message).not.toContain('hunter2');
    expect(failed.events.map((e) => e.name)).toEqual(['exception']);
    expect(JSON.stringify(failed.events[0]!.attributes)).not.toContain('hunter2');
    expect(delivered.status.code).toBe(SpanStatusCode.UNSET);
    // Parented on the stored context; what went out carries the publish span's, its tracestate kept.
    for (const s of spans) {
      expect(s.spanContext().traceId).toBe(stored.split('-')[1]);
      expect(s.parentSpanContext?.spanId).toBe(stored.split('-')[2]);
      expect(s.attributes['messaging.system']).toBe('recording');
      expect(s.attributes['messaging.destination.name']).toBe('order.order.placed');
    }
    const sent = publisher.received[0]!.headers;
    expect(sent['traceparent']).toBe(`00-${stored.split('-')[1]}-${delivered.spanContext().spanId}-01`);
    expect(sent['tracestate']).toBe('vendor=1');
    expect(sent['x-mine']).toBe('kept');
  });

  it('an event enqueued without a trace context: the publish span is a root', async () => {
    registerSdk();
    await inTransaction(db.pool, (tx) =>
      enqueue(
        tx,
        { aggregateType: 'order', aggregateId: `root-${suffix}`, type: 'x', payload: {} },
        { schema: db.schema },
      ),
    );
    const publisher = new RecordingPublisher();
    await relayUntil(publisher, () => publisher.received.length === 1, 'published');
    const [publish] = exporter.getFinishedSpans();
    expect(publish!.parentSpanContext).toBeUndefined();
    expect(publisher.received[0]!.headers['traceparent']).toContain(publish!.spanContext().spanId);
  });

  function messageWith(headers: Record<string, string>): InboxMessage {
    return {
      eventId: crypto.randomUUID(),
      type: 'order.placed',
      aggregateType: 'order',
      aggregateId: `inbox-${randomBytes(4).toString('hex')}`,
      sequence: 1,
      schemaVersion: 1,
      payload: new TextEncoder().encode('{}'),
      headers,
    };
  }

  it("processParent 'link': a new trace, linked to the publish span", async () => {
    registerSdk();
    const inbox: Inbox = createInbox({
      pool: db.pool,
      consumer: `link-${suffix}`,
      schema: db.schema,
      tracing: { processParent: 'link' },
    });
    const seen: string[] = [];
    await inbox.handle(messageWith({ traceparent: stored }), spanningHandler(seen));
    const spans = exporter.getFinishedSpans();
    const processSpan = byName(spans, 'process');
    expect(processSpan.spanContext().traceId).not.toBe(stored.split('-')[1]);
    expect(processSpan.parentSpanContext).toBeUndefined();
    expect(processSpan.links.map((l) => [l.context.traceId, l.context.spanId])).toEqual([
      [stored.split('-')[1], stored.split('-')[2]],
    ]);
    expect(byName(spans, 'handler').parentSpanContext?.spanId).toBe(processSpan.spanContext().spanId);
  });

  it('a handler that fails: the process span records the error; a duplicate is not an error', async () => {
    registerSdk();
    const inbox = createInbox({ pool: db.pool, consumer: `fail-${suffix}`, schema: db.schema });
    const message = messageWith({ traceparent: stored });
    const failing: InboxHandler = async () => {
      throw new Error('stock service https://svc/?token=s3cr3t down');
    };
    expect((await inbox.handle(message, failing)).status).toBe('deferred');
    expect((await inbox.handle(message, spanningHandler([]))).status).toBe('processed');
    expect((await inbox.handle(message, spanningHandler([]))).status).toBe('duplicate');
    const spans = exporter.getFinishedSpans().filter((s) => s.name === 'process');
    expect(spans.map((s) => [s.attributes['tx_outbox.inbox.status'], s.status.code])).toEqual([
      ['deferred', SpanStatusCode.ERROR],
      ['processed', SpanStatusCode.UNSET],
      ['duplicate', SpanStatusCode.UNSET],
    ]);
    expect(spans[0]!.status.message).not.toContain('s3cr3t');
    expect(spans[0]!.events.map((e) => e.name)).toEqual(['exception']);
    for (const s of spans) expect(s.parentSpanContext?.spanId).toBe(stored.split('-')[2]);
  });

  it('a message without trace context: the process span is a child of the caller’s span, if any', async () => {
    registerSdk();
    const inbox = createInbox({ pool: db.pool, consumer: `ambient-${suffix}`, schema: db.schema });
    let receive: Span | undefined;
    await tracer().startActiveSpan('receive', async (span) => {
      receive = span;
      await inbox.handle(messageWith({}), spanningHandler([]));
      span.end();
    });
    const processSpan = byName(exporter.getFinishedSpans(), 'process');
    expect(processSpan.parentSpanContext?.spanId).toBe(receive!.spanContext().spanId);
    expect(processSpan.links).toEqual([]);
  });

  it('rejects a tracing option it does not know', () => {
    expect(() =>
      createInbox({
        pool: db.pool,
        consumer: 'x',
        tracing: { processParent: 'child' as 'message' },
      }),
    ).toThrow(/tracing.processParent/);
  });
});
