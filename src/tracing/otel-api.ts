/**
 * The OpenTelemetry API, when `@opentelemetry/api` is installed (an optional peer dependency):
 * imported once, lazily; nothing of it is loaded otherwise. `tracerOf` is the cheap per-batch
 * test for "is a tracer provider registered": the API's proxy provider has no delegate until an
 * SDK registers one, and then hands out that SDK's (cached) tracer.
 */
import type { Tracer } from '@opentelemetry/api';

export type OtelApi = typeof import('@opentelemetry/api');

/** The instrumentation scope of every span tx-outbox starts. */
export const TRACER_NAME = 'tx-outbox';

let api: OtelApi | null | undefined;
let loading: Promise<OtelApi | null> | undefined;

/** The API module, or null when it is not installed. */
export function loadOtelApi(): Promise<OtelApi | null> {
  loading ??= import('@opentelemetry/api').then(
    (module) => {
      api = module;
      return module;
    },
    () => {
      api = null;
      return null;
    },
  );
  return loading;
}

/** The API if {@link loadOtelApi} finished: undefined while not yet loaded, null when absent. */
export function loadedOtelApi(): OtelApi | null | undefined {
  return api;
}

interface ProxyProvider {
  getDelegateTracer?(name: string): Tracer | undefined;
}

/** The registered SDK's tracer, or undefined when no tracer provider is registered. */
export function tracerOf(otel: OtelApi): Tracer | undefined {
  const provider = otel.trace.getTracerProvider() as ProxyProvider;
  if (typeof provider.getDelegateTracer === 'function') return provider.getDelegateTracer(TRACER_NAME);
  // Not the API's proxy (an API of another version registered its own): ask it, as is.
  return otel.trace.getTracer(TRACER_NAME);
}
