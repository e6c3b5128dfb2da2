import * as otel from '@opentelemetry/api';
import { propagation, trace } from '@opentelemetry/api';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterEach, describe, expect, it } from 'vitest';
import { messagingSystem } from '../../src/tracing/messaging.js';
import { loadOtelApi, tracerOf } from '../../src/tracing/otel-api.js';
import { PublishTracing } from '../../src/tracing/publish-spans.js';
import { remoteSpanContext, withTraceHeaders } from '../../src/tracing/trace-context.js';
import { makeMessage } from '../helpers/messages.js';

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const SPAN = '00f067aa0ba902b7';

afterEach(() => {
  trace.disable();
  propagation.disable();
});

function register(): InMemorySpanExporter {
  const exporter = new InMemorySpanExporter();
  trace.setGlobalTracerProvider(
    new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
  );
  return exporter;
}

describe('PublishTracing', () => {
  it('does nothing without a tracer provider, and sees one registered or removed between batches', async () => {
    const tracing = new PublishTracing('nats');
    await tracing.ready();
    expect(tracing.ready()).toBeUndefined();
    const batch = [makeMessage({ headers: { traceparent: `00-${TRACE}-${SPAN}-01`, 'x-a': 'b' } })];
    expect(tracing.start(batch)).toBeUndefined();

    const exporter = register();
    const traced = tracing.start(batch)!;
    expect(traced).toBeDefined();
    expect(traced.messages[0]).not.toBe(batch[0]);
    expect(batch[0]!.headers['traceparent']).toBe(`00-${TRACE}-${SPAN}-01`);
    expect(traced.messages[0]!.headers['x-a']).toBe('b');
    traced.end([{ ok: true }]);
    const [span] = exporter.getFinishedSpans();
    expect(traced.messages[0]!.headers['traceparent']).toBe(`00-${TRACE}-${span!.spanContext().spanId}-01`);
    expect(span!.attributes['messaging.batch.message_count']).toBeUndefined();

    trace.disable();
    expect(tracing.start(batch)).toBeUndefined();
  });

  it('sets messaging.batch.message_count when the call carries more than one message', async () => {
    const tracing = new PublishTracing('kafka');
    await tracing.ready();
    const exporter = register();
    const traced = tracing.start([makeMessage({ aggregateId: 'a' }), makeMessage({ aggregateId: 'b' })])!;
    traced.end([{ ok: true }, { ok: false, retryable: true, error: new Error('no') }]);
    const spans = exporter.getFinishedSpans();
    expect(spans.map((s) => s.attributes['messaging.batch.message_count'])).toEqual([2, 2]);
    expect(spans.map((s) => s.status.code)).toEqual([otel.SpanStatusCode.UNSET, otel.SpanStatusCode.ERROR]);
  });

  it('names MQTT destinations as the MQTT publisher does', async () => {
    const tracing = new PublishTracing('mqtt');
    await tracing.ready();
    const exporter = register();
    tracing
      .start([makeMessage({ aggregateType: 'order', type: 'order.created', topic: null })])!
      .end([{ ok: true }]);
    expect(exporter.getFinishedSpans()[0]!.name).toBe('publish order/order/created');
  });
});

describe('trace context headers', () => {
  it('reads a valid traceparent and refuses malformed ones', () => {
    const ok = remoteSpanContext(otel, { traceparent: `00-${TRACE}-${SPAN}-01`, tracestate: 'a=1,b=2' });
    expect(ok).toMatchObject({ traceId: TRACE, spanId: SPAN, traceFlags: 1, isRemote: true });
    expect(ok!.traceState!.get('b')).toBe('2');
    for (const bad of [
      `00-${'0'.repeat(32)}-${SPAN}-01`,
      `00-${TRACE}-${'0'.repeat(16)}-01`,
      `ff-${TRACE}-${SPAN}-01`,
      `00-${TRACE}-${SPAN}-01-extra`,
      `00-${TRACE.toUpperCase()}-${SPAN}-01`,
      `00-${TRACE}-${SPAN}`,
      '',
    ])
      expect(remoteSpanContext(otel, { traceparent: bad }), bad).toBeUndefined();
    // A later version may append fields: read the ones version 00 defines.
    expect(remoteSpanContext(otel, { traceparent: `01-${TRACE}-${SPAN}-00-more` })?.traceFlags).toBe(0);
  });

  it('replaces traceparent and tracestate, keeps the rest, with or without a registered propagator', () => {
    const context = trace.setSpanContext(otel.ROOT_CONTEXT, {
      traceId: TRACE,
      spanId: 'aaaaaaaaaaaaaaaa',
      traceFlags: 0,
    });
    const headers = { traceparent: `00-${TRACE}-${SPAN}-01`, tracestate: 'old=1', 'x-a': 'b' };
    expect(withTraceHeaders(otel, headers, context)).toEqual({
      traceparent: `00-${TRACE}-aaaaaaaaaaaaaaaa-00`,
      'x-a': 'b',
    });
    expect(headers.tracestate).toBe('old=1');
  });
});

describe('trace context headers named in another case', () => {
  it('reads a stored Traceparent and replaces it instead of sending two trace contexts', () => {
    const stored = { Traceparent: `00-${TRACE}-${SPAN}-01`, TraceState: 'a=1', 'x-a': 'b' };
    expect(remoteSpanContext(otel, stored)).toMatchObject({ traceId: TRACE, spanId: SPAN });
    const context = trace.setSpanContext(otel.ROOT_CONTEXT, {
      traceId: TRACE,
      spanId: 'aaaaaaaaaaaaaaaa',
      traceFlags: 1,
    });
    expect(withTraceHeaders(otel, stored, context)).toEqual({
      traceparent: `00-${TRACE}-aaaaaaaaaaaaaaaa-01`,
      'x-a': 'b',
    });
  });
});

describe('messagingSystem', () => {
  it('is the publisher kind; a router names its publishers’ shared kind', () => {
    expect(messagingSystem('kafka')).toBe('kafka');
    expect(messagingSystem('rabbitmq')).toBe('rabbitmq');
    expect(messagingSystem('router(nats,nats)')).toBe('nats');
    expect(messagingSystem('router(nats,kafka)')).toBe('tx-outbox-router');
  });
});

describe('tracerOf', () => {
  it('is undefined until a provider is registered', async () => {
    const api = (await loadOtelApi())!;
    expect(tracerOf(api)).toBeUndefined();
    register();
    expect(tracerOf(api)).toBeDefined();
  });
});
