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

const NONE: Record<string, string> = Object.freeze({}) as Record<string, string>;

/**
 * The trace headers without waiting, once the API has been looked for (undefined before: then
 * await `activeTraceHeaders`). Saves the producer a turn of the event loop per call.
 */
export function activeTraceHeadersNow(): Record<string, string> | undefined {
  if (api === undefined) return undefined;
  return api === null ? NONE : headersOf(api);
}

export async function activeTraceHeaders(): Promise<Record<string, string>> {
  if (api === undefined) {
    loading ??= load();
    await loading;
  }
  if (!api) return NONE;
  return headersOf(api);
}

function headersOf(api: OtelApi): Record<string, string> {
  const carrier: Record<string, string> = {};
  api.propagation.inject(api.context.active(), carrier);
  if (carrier['traceparent']) return pick(carrier);
  const span = api.trace.getActiveSpan();
  const ctx = span?.spanContext();
  if (!ctx || !api.trace.isSpanContextValid(ctx)) return NONE;
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
