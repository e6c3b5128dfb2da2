/**
 * One list of the socket and DNS error codes that mean "the other side cannot be reached", not
 * "this request is bad": publishers report them as BROKER_UNAVAILABLE (no attempt is charged),
 * the database paths retry them, the CLI waits them out.
 */
export const UNREACHABLE_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  // undici (fetch): a socket that closed under the request, a connect that timed out.
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/** Of {@link UNREACHABLE_CODES}, those for which this list is checked to be a subset. */
function subset(codes: readonly string[]): ReadonlySet<string> {
  for (const code of codes)
    if (!UNREACHABLE_CODES.has(code)) throw new Error(`${code} is not in UNREACHABLE_CODES`);
  return new Set(codes);
}

/**
 * The network codes `isRetryableDatabaseError` retries (so `tx-outbox relay` waits for the
 * database): a narrower set than the publishers' — an unroutable host or network fails at once.
 */
export const DATABASE_RETRY_CODES = subset([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/** The codes for which the CLI says "cannot connect to the database" (a connect that failed). */
export const DATABASE_CONNECT_CODES = subset([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
]);

/** True when `code` (an error's `code` property) is one of {@link UNREACHABLE_CODES}. */
export function isUnreachableCode(code: unknown): boolean {
  return typeof code === 'string' && UNREACHABLE_CODES.has(code);
}

/** The first unreachable code on `error` or its `cause` chain (AggregateError members included). */
export function unreachableCode(error: unknown, depth = 0): string | undefined {
  if (error === null || typeof error !== 'object' || depth > 8) return undefined;
  const code = (error as { code?: unknown }).code;
  if (isUnreachableCode(code)) return code as string;
  const inner = (error as { errors?: unknown }).errors;
  if (Array.isArray(inner)) {
    for (const e of inner) {
      const found = unreachableCode(e, depth + 1);
      if (found !== undefined) return found;
    }
  }
  return unreachableCode((error as { cause?: unknown }).cause, depth + 1);
}
