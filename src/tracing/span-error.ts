/** A failure on a span: error status, `error.type`, the exception event — its texts redacted. */
import type { Span } from '@opentelemetry/api';
import { errorMessage } from '../errors.js';
import { redactText } from '../redact.js';
import type { OtelApi } from './otel-api.js';

export function recordFailure(otel: OtelApi, span: Span, error: unknown): void {
  const message = redactText(errorMessage(error));
  const e = error instanceof Error ? error : undefined;
  span.recordException({
    name: e?.name ?? 'Error',
    message,
    ...(e?.stack ? { stack: redactText(e.stack) } : {}),
  });
  span.setAttribute('error.type', errorType(error));
  span.setStatus({ code: otel.SpanStatusCode.ERROR, message });
}

/** `error.type`: the error's code when it has one (`TXO_…`, `ECONNREFUSED`), else its class name. */
export function errorType(error: unknown): string {
  if (!(error instanceof Error)) return 'Error';
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' && code !== '' ? code : error.name || 'Error';
}
