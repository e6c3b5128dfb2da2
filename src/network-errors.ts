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
export function unreachableCode(error: unknown): string | undefined {
  return findCode(error, UNREACHABLE_CODES);
}

/**
 * The error codes that mean this process or its host ran out of a resource (descriptors,
 * socket buffers, memory, local ports), not that the other side refused anything, with what
 * each says. A publish failing with one is not the event's fault: the relay judges it like an
 * unreachable broker (BROKER_UNAVAILABLE: it backs off as a whole, no attempt is charged), so
 * a process out of descriptors cannot dead-letter events that did nothing wrong.
 * EADDRNOTAVAIL is a connect finding no local port (ephemeral ports used up) or address free.
 */
export const LOCAL_EXHAUSTION_CODES: ReadonlyMap<string, string> = new Map([
  ['EMFILE', 'this process has no file descriptor left (see `ulimit -n`)'],
  ['ENFILE', "the host's table of open files is full"],
  ['ENOBUFS', 'the host has no buffer space left for sockets'],
  ['ENOMEM', 'the host is out of memory'],
  ['EADDRNOTAVAIL', 'no local address or port is free to connect from'],
]);

/**
 * The first code of {@link LOCAL_EXHAUSTION_CODES} on `error` or its `cause` chain (AggregateError
 * members included). Only the `code` property counts, never a message: a message may carry
 * names the producer chose (a topic called `EMFILE`), and reading it would let an event pass
 * its own failure off as the host's.
 */
export function exhaustionCode(error: unknown): string | undefined {
  return findCode(error, LOCAL_EXHAUSTION_CODES);
}

/** The first of `codes` on `error`, its `errors` (AggregateError) or its `cause` chain, depth first. */
function findCode(error: unknown, codes: { has(code: string): boolean }, depth = 0): string | undefined {
  if (error === null || typeof error !== 'object' || depth > 8) return undefined;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && codes.has(code)) return code;
  const inner = (error as { errors?: unknown }).errors;
  if (Array.isArray(inner)) {
    for (const e of inner) {
      const hit = findCode(e, codes, depth + 1);
      if (hit !== undefined) return hit;
    }
  }
  return findCode((error as { cause?: unknown }).cause, codes, depth + 1);
}
