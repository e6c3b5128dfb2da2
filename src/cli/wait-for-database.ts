/**
 * A service started together with its database (a container, a host booting) may come up
 * first: the database refuses connections or answers "the database system is starting up".
 * That is transient, so `tx-outbox relay` waits for it, with backoff and a log line per try,
 * instead of exiting; what a retry cannot cure (no outbox schema, bad password, unknown
 * database) still fails at once. Each try has a deadline: a database that takes the
 * connection but never answers (a stalled link, a hung host) is a failed try, logged, not a
 * silent hang that a signal cannot end.
 */

import pg from 'pg';
import type { Logger as PinoLogger } from 'pino';
import { errorMessage, isRetryableDatabaseError } from '../errors.js';
import { type OutboxStatus, outboxStatus } from '../ops/status.js';
import { fullJitterDelay } from '../relay/backoff.js';
import { sleep } from './common.js';

/** Retry delays while the database is not reachable: 0.5 s plus up to 1 s, doubling to 10 s (full jitter). */
const BACKOFF = { baseMs: 1000, capMs: 10_000 };

/** Longest a try may take to connect and answer. */
const TRY_TIMEOUT_MS = 5_000;

/**
 * The outbox status once the database answers, or undefined when `signal` aborted first.
 * `url` is the connection string; `where` the database address as it may be logged (no password).
 */
export async function waitForDatabase(
  url: string,
  schema: string,
  where: string,
  logger: PinoLogger,
  signal: AbortSignal,
): Promise<OutboxStatus | undefined> {
  const startedAt = Date.now();
  for (let failures = 1; ; failures += 1) {
    try {
      const status = await untilAborted(tryOnce(url, schema), signal);
      if (status === undefined) return undefined;
      if (failures > 1) {
        logger.info({ database: where, waitedMs: Date.now() - startedAt }, 'database reachable');
      }
      return status;
    } catch (error) {
      if (!isRetryableDatabaseError(error)) throw error;
      if (signal.aborted) return undefined;
      const retryInMs = 500 + fullJitterDelay(BACKOFF, failures);
      const code = (error as { code?: unknown }).code;
      logger.warn(
        { database: where, error: errorMessage(error), code, attempt: failures, retryInMs },
        'database not reachable yet; waiting for it',
      );
      await sleep(retryInMs, signal);
      if (signal.aborted) return undefined;
    }
  }
}

/** One try on a connection of its own, bounded by TRY_TIMEOUT_MS. */
async function tryOnce(url: string, schema: string): Promise<OutboxStatus> {
  const pool = new pg.Pool({
    connectionString: url,
    max: 1,
    application_name: 'tx-outbox',
    connectionTimeoutMillis: TRY_TIMEOUT_MS,
  });
  pool.on('error', () => undefined); // the try's own error is what counts
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      // 'Connection terminated …' is what a retry may cure (see isRetryableDatabaseError).
      reject(new Error(`Connection terminated: no answer within ${TRY_TIMEOUT_MS} ms`));
    }, TRY_TIMEOUT_MS);
  });
  try {
    return await Promise.race([outboxStatus(pool, { schema }), deadline]);
  } finally {
    clearTimeout(timer);
    void pool.end().catch(() => undefined);
  }
}

/** `promise`, or undefined as soon as `signal` aborts. */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T | undefined> {
  if (signal.aborted) return Promise.resolve(undefined);
  return new Promise<T | undefined>((resolve, reject) => {
    const onAbort = (): void => resolve(undefined);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
