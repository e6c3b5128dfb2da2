/**
 * A service started together with its database (a container, a host booting) may come up
 * first: the database refuses connections or answers "the database system is starting up".
 * That is transient, so `tx-outbox relay` waits for it, with backoff and a log line per try,
 * instead of exiting; what a retry cannot cure (no outbox schema, bad password, unknown
 * database) still fails at once.
 */

import type pg from 'pg';
import type { Logger as PinoLogger } from 'pino';
import { errorMessage, isRetryableDatabaseError } from '../errors.js';
import { type OutboxStatus, outboxStatus } from '../ops/status.js';
import { fullJitterDelay } from '../relay/backoff.js';
import { sleep } from './common.js';

/** Retry delays while the database is not reachable: 0.5 s plus up to 1 s, doubling to 10 s (full jitter). */
const BACKOFF = { baseMs: 1000, capMs: 10_000 };

/**
 * The outbox status once the database answers, or undefined when `signal` aborted first.
 * `where` is the database address as it may be logged (no password).
 */
export async function waitForDatabase(
  pool: pg.Pool,
  schema: string,
  where: string,
  logger: PinoLogger,
  signal: AbortSignal,
): Promise<OutboxStatus | undefined> {
  const startedAt = Date.now();
  for (let failures = 1; ; failures += 1) {
    try {
      const status = await outboxStatus(pool, { schema });
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
