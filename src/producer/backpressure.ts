/**
 * `enqueue`'s backpressure: refuse (or warn) once the outbox backlog reaches a ceiling. The
 * check costs no count: the relays publish the backlog into a one-row table every few seconds
 * (src/relay/backlog-task.ts), and this process reads it at most once a second per schema, on
 * the caller's own transaction client, before the insert. A read in the same second is served
 * from the cache without a statement.
 */

import { OutboxBackpressureError, OutboxError } from '../errors.js';
import type { Logger } from '../logger.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { namedStatement } from '../schema/statement.js';
import { READ_PUBLISHED_BACKLOG_SQL } from './backpressure-sql.js';
import type { SqlExecutor } from './executor.js';

/** What `enqueue` does above `maxPending`: throw {@link OutboxBackpressureError}, or log and write. */
export type BackpressureMode = 'throw' | 'warn';

/** How long one read of the published backlog serves this process, per schema. */
export const BACKLOG_CACHE_MS = 1000;
/** With `onBackpressure: 'warn'`, one warning per schema at most this often. */
export const BACKPRESSURE_WARN_INTERVAL_MS = 10_000;

export interface BackpressureCheck {
  readonly schema: string;
  readonly maxPending: number;
  readonly mode: BackpressureMode;
  readonly prepared: boolean;
  /** For 'warn'; without one, a process warning (`process.emitWarning`, code TXO_BACKPRESSURE). */
  readonly logger: Logger | undefined;
}

interface Measurement {
  readonly pending: number;
  readonly pendingFrom: 'relay' | 'estimate';
}

interface CacheEntry {
  value: Measurement | undefined;
  /** When the last read started (a refresh in flight counts: other callers keep the old value). */
  readAt: number;
}

interface PublishedRow {
  pending: string | null;
  dead: string;
  fresh: boolean;
  live: string;
}

/** The per-process gate: a cache of the published backlog and the warning cadence, per schema. */
export class BackpressureGate {
  private readonly cache = new Map<string, CacheEntry>();
  private readonly warnedAt = new Map<string, number>();

  constructor(private readonly now: () => number = () => Date.now()) {}

  /**
   * Throws {@link OutboxBackpressureError} (mode 'throw') or warns (mode 'warn') when the
   * backlog is at or over the ceiling. Runs at most one small SELECT on `tx` a second per schema;
   * it leaves the caller's transaction as it was.
   */
  async check(tx: SqlExecutor, check: BackpressureCheck): Promise<void> {
    const measured = await this.measure(tx, check);
    if (measured.pending < check.maxPending) return;
    const error = new OutboxBackpressureError(
      check.schema,
      measured.pending,
      check.maxPending,
      measured.pendingFrom,
    );
    if (check.mode === 'throw') throw error;
    this.warn(check, error);
  }

  /** Forgets cached measurements and warnings (tests). */
  reset(): void {
    this.cache.clear();
    this.warnedAt.clear();
  }

  private async measure(tx: SqlExecutor, check: BackpressureCheck): Promise<Measurement> {
    const now = this.now();
    let entry = this.cache.get(check.schema);
    if (entry?.value && now - entry.readAt < BACKLOG_CACHE_MS) return entry.value;
    if (!entry) {
      entry = { value: undefined, readAt: 0 };
      this.cache.set(check.schema, entry);
    }
    const previous = entry.readAt;
    entry.readAt = now;
    try {
      entry.value = await read(tx, check);
      return entry.value;
    } catch (error) {
      entry.readAt = previous;
      throw error;
    }
  }

  private warn(check: BackpressureCheck, error: OutboxBackpressureError): void {
    const now = this.now();
    const last = this.warnedAt.get(check.schema);
    if (last !== undefined && now - last < BACKPRESSURE_WARN_INTERVAL_MS) return;
    this.warnedAt.set(check.schema, now);
    const fields = {
      schema: check.schema,
      pending: error.pending,
      maxPending: error.ceiling,
      pendingFrom: error.pendingFrom,
      code: error.code,
    };
    const message = 'outbox backlog at or over maxPending; enqueueing anyway (onBackpressure: warn)';
    if (check.logger) check.logger.warn(fields, message);
    else
      process.emitWarning(
        `${error.message.replace(': not enqueued.', ': enqueued anyway (onBackpressure: warn).')}`,
        {
          code: 'TXO_BACKPRESSURE',
        },
      );
  }
}

/** The process-wide gate `enqueue` uses. */
export const backpressureGate = new BackpressureGate();

const statements = new Map<string, ReturnType<typeof namedStatement>>();

async function read(tx: SqlExecutor, check: BackpressureCheck): Promise<Measurement> {
  const key = `${check.schema}\u0000${check.prepared}`;
  let statement = statements.get(key);
  if (!statement) {
    statement = namedStatement(
      'txo_backlog',
      withSchema(READ_PUBLISHED_BACKLOG_SQL, quoteSchema(check.schema)),
      check.prepared,
    );
    statements.set(key, statement);
  }
  let rows: PublishedRow[];
  try {
    ({ rows } = await tx.query<PublishedRow>({ ...statement, values: [] }));
  } catch (error) {
    if ((error as { code?: unknown }).code === '42P01') {
      throw new OutboxError(
        `maxPending needs the backlog table of schema "${check.schema}" (migration 8): run \`tx-outbox migrate\` first`,
        { code: 'TXO_NO_SCHEMA', cause: error },
      );
    }
    throw error;
  }
  const row = rows[0];
  // PostgreSQL's live-row count minus the dead events last published: read on every check, it
  // bounds the figure from below even while a relay's figure is fresh (a relay that just died, a
  // relay whose broker is down and whose figure lags the producers). It lags the commits by up to
  // about 10 s itself (a backend flushes its statistics when it goes idle, at most once a second,
  // and an idle pooled connection only after 10 s), so the larger of the two is taken.
  const estimate = Math.max(0, Number(row?.live ?? 0) - Number(row?.dead ?? 0));
  if (row?.fresh && row.pending !== null) {
    const published = Number(row.pending);
    return published >= estimate
      ? { pending: published, pendingFrom: 'relay' }
      : { pending: estimate, pendingFrom: 'estimate' };
  }
  return { pending: estimate, pendingFrom: 'estimate' };
}
