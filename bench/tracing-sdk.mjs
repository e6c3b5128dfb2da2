// Registers an OpenTelemetry SDK in a benchmark relay process, as an application would
// (provider, AsyncLocalStorage context manager, W3C propagator), for TXO_BENCH_TRACING:
//   noop  — spans created and sampled (AlwaysOn), ended into a NoopSpanProcessor;
//   batch — the same into a BatchSpanProcessor whose exporter drops the batch (no network);
//   nocm  — as noop without the AsyncLocalStorage context manager (the relay needs none: it
//           passes each span's parent explicitly), to tell its cost from the spans'.
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, BatchSpanProcessor, NoopSpanProcessor } from '@opentelemetry/sdk-trace-base';

export function registerBenchTracing(mode) {
  if (!['noop', 'batch', 'nocm'].includes(mode))
    throw new Error(`TXO_BENCH_TRACING: noop, batch or nocm, not ${mode}`);
  const dropped = { export: (_spans, done) => done({ code: 0 }), shutdown: async () => {} };
  const processor = mode === 'batch' ? new BatchSpanProcessor(dropped) : new NoopSpanProcessor();
  const provider = new BasicTracerProvider({ spanProcessors: [processor] });
  if (mode !== 'nocm') context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  return provider;
}
