/**
 * Reads the active OpenTelemetry span, when @opentelemetry/api is installed,
 * and returns W3C trace-context headers for it. Loaded once, lazily.
 */
type OtelApi = typeof import('@opentelemetry/api');

let api: OtelApi | null | undefined;
let loading: Promise<void> | undefined;

async function load(): Promise<void> {
  try {
    api = await import('@opentelemetry/api');
  } catch {
    api = null;
  }
}

export async function activeTraceHeaders(): Promise<Record<string, string>> {
  if (api === undefined) {
    loading ??= load();
    await loading;
  }
  if (!api) return {};
  const carrier: Record<string, string> = {};
  api.propagation.inject(api.context.active(), carrier);
  if (carrier['traceparent']) return pick(carrier);
  const span = api.trace.getActiveSpan();
  const ctx = span?.spanContext();
  if (!ctx || !api.trace.isSpanContextValid(ctx)) return {};
  const flags = (ctx.traceFlags & 0xff).toString(16).padStart(2, '0');
  const headers: Record<string, string> = { traceparent: `00-${ctx.traceId}-${ctx.spanId}-${flags}` };
  const state = ctx.traceState?.serialize();
  if (state) headers['tracestate'] = state;
  return headers;
}

function pick(carrier: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = { traceparent: carrier['traceparent']! };
  if (carrier['tracestate']) out['tracestate'] = carrier['tracestate'];
  return out;
}
