/**
 * W3C trace-context headers (`traceparent`, `tracestate`) read into and written from an
 * OpenTelemetry context. The event's stored headers are always W3C (see src/producer/trace.ts),
 * so they are read as such whichever propagator is registered; written, the registered
 * propagator's headers are added (B3 …), and `traceparent` is always there.
 */
import type { Context, SpanContext } from '@opentelemetry/api';
import type { OtelApi } from './otel-api.js';

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
const TRACE_HEADERS: readonly string[] = ['traceparent', 'tracestate'];

/**
 * A header's value by its name in any case: `enqueue` compares header names case-insensitively,
 * so an event may carry its own trace context as `Traceparent`. The lower-case name wins.
 */
function headerValue(
  headers: Readonly<Record<string, string | undefined>>,
  name: string,
): string | undefined {
  const exact = headers[name];
  if (exact !== undefined) return exact;
  for (const key in headers) if (key.toLowerCase() === name) return headers[key];
  return undefined;
}

/** The remote span context in `headers`, or undefined when there is none (or it is invalid). */
export function remoteSpanContext(
  otel: OtelApi,
  headers: Readonly<Record<string, string | undefined>>,
): SpanContext | undefined {
  const match = TRACEPARENT.exec((headerValue(headers, 'traceparent') ?? '').trim());
  if (!match || match[1] === 'ff' || (match[1] === '00' && match[5] !== undefined)) return undefined;
  const state = headerValue(headers, 'tracestate');
  const context: SpanContext = {
    traceId: match[2]!,
    spanId: match[3]!,
    traceFlags: Number.parseInt(match[4]!, 16),
    isRemote: true,
    ...(state ? { traceState: otel.createTraceState(state) } : {}),
  };
  return otel.trace.isSpanContextValid(context) ? context : undefined;
}

/**
 * `headers` with the trace context of `context`'s span in place of the trace-context headers they
 * had (the consumer's parent becomes that span).
 */
export function withTraceHeaders(
  otel: OtelApi,
  headers: Readonly<Record<string, string>>,
  context: Context,
): Record<string, string> {
  // Built without the two rather than copied and deleted from (a delete leaves a slow object).
  const out: Record<string, string> = {};
  for (const name in headers) if (!TRACE_HEADERS.includes(name.toLowerCase())) out[name] = headers[name]!;
  otel.propagation.inject(context, out);
  // A trace state the API dropped (invalid, too long) is injected as an empty header: leave it out.
  if (out['tracestate'] === '') delete out['tracestate'];
  if (out['traceparent'] === undefined) {
    const span = otel.trace.getSpanContext(context);
    if (span && otel.trace.isSpanContextValid(span)) {
      const flags = (span.traceFlags & 0xff).toString(16).padStart(2, '0');
      out['traceparent'] = `00-${span.traceId}-${span.spanId}-${flags}`;
      const state = span.traceState?.serialize();
      if (state) out['tracestate'] = state;
    }
  }
  return out;
}
