/**
 * The `code` label of `tx_outbox_publish_failures_total`: the error's `code` (or its cause's)
 * when it is one of a fixed set, else `other` — a label must never take unbounded values.
 */
export const FAILURE_CODES: ReadonlySet<string> = new Set([
  'TXO_BROKER_UNAVAILABLE',
  'TXO_PUBLISH_RETRYABLE',
  'TXO_PUBLISH_PERMANENT',
  'TXO_PUBLISHER_FAILED',
  'TXO_PUBLISHER_CLOSED',
  'TXO_NO_ROUTE',
  'TXO_WEBHOOK_NO_ENDPOINT',
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'EAI_AGAIN',
]);

function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' && FAILURE_CODES.has(code) ? code : undefined;
}

/** The bounded failure code of a publish error. */
export function failureCode(error: unknown): string {
  return codeOf(error) ?? codeOf((error as { cause?: unknown } | null | undefined)?.cause) ?? 'other';
}
