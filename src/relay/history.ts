/**
 * Delivery history: the relay's options for it, and the maintenance of its daily partitions
 * (created ahead, dropped behind), run by the relay on start and then every hour, or by hand
 * (`tx-outbox history maintain`). The rows themselves are written by the outcome statement
 * (RECORD_OUTCOME_HISTORY_SQL in outcome-sql.ts).
 */
import type { Pool } from 'pg';
import { OutboxError, OutboxValidationError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { GaugeMetric } from '../metrics/sink.js';
import { Checkout } from '../schema/checkout.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import {
  HISTORY_ADD_PARTITION_SQL,
  HISTORY_DROP_PARTITION_SQL,
  HISTORY_LOCK_TIMEOUT_SQL,
  HISTORY_PARTITIONS_SQL,
  HISTORY_PLAN_SQL,
  HISTORY_PURGE_DEFAULT_SQL,
} from './history-sql.js';

/** `createRelay({ history })`: keep a record of every delivered event (off by default). */
export interface HistoryOptions {
  /**
   * Whole days (UTC) kept before the day of publication: a day's partition is dropped once it
   * is more than this many days old. Default 7; 1 to 3650.
   */
  readonly retentionDays?: number;
  /** Keep each event's payload too. Default false: identity and timing only. */
  readonly payloads?: boolean;
  /** Daily partitions kept ready after today. Default 3; 1 to 60. */
  readonly aheadDays?: number;
  /** How often the relay runs the partition maintenance, ms. Default 3600000 (an hour). */
  readonly maintenanceIntervalMs?: number;
}

export interface ResolvedHistory {
  readonly retentionDays: number;
  readonly payloads: boolean;
  readonly aheadDays: number;
  readonly maintenanceIntervalMs: number;
}

function boundedInt(value: number | undefined, fallback: number, field: string, max: number): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < 1 || v > max) {
    throw new OutboxValidationError(
      field,
      `is ${String(v)}`,
      `Pass an integer from 1 to ${max} (default ${fallback}).`,
    );
  }
  return v;
}

/** `true` or an options object turns the history on; absent or `false` leaves it off. */
export function resolveHistory(option: boolean | HistoryOptions | undefined): ResolvedHistory | undefined {
  if (option === undefined || option === false) return undefined;
  if (option !== true && (typeof option !== 'object' || option === null)) {
    throw new OutboxValidationError(
      'history',
      `is ${JSON.stringify(option)}`,
      'Pass true, or { retentionDays, payloads } to keep a delivery history; omit it to keep none.',
    );
  }
  const o: HistoryOptions = option === true ? {} : option;
  const payloads = o.payloads ?? false;
  if (typeof payloads !== 'boolean') {
    throw new OutboxValidationError('history.payloads', `is ${String(payloads)}`, 'Pass true or false.');
  }
  return Object.freeze({
    retentionDays: boundedInt(o.retentionDays, 7, 'history.retentionDays', 3650),
    payloads,
    aheadDays: boundedInt(o.aheadDays, 3, 'history.aheadDays', 60),
    maintenanceIntervalMs: boundedInt(
      o.maintenanceIntervalMs,
      3_600_000,
      'history.maintenanceIntervalMs',
      2 ** 31 - 1,
    ),
  });
}

export interface MaintainHistoryOptions {
  readonly schema?: string;
  /** Default 7 (see {@link HistoryOptions.retentionDays}). */
  readonly retentionDays?: number;
  /** Default 3 (see {@link HistoryOptions.aheadDays}). */
  readonly aheadDays?: number;
}

/** What one maintenance run did. Days are UTC dates, `YYYY-MM-DD`. */
export interface HistoryMaintenance {
  /** Partitions created. */
  readonly created: readonly string[];
  /** Partitions dropped (older than the retention). */
  readonly dropped: readonly string[];
  /** Rows moved out of the DEFAULT partition into the partitions created for their day. */
  readonly moved: number;
  /** DEFAULT rows older than the retention deleted. */
  readonly purged: number;
  /** Steps left for the next run: a lock was not granted within the lock timeout. */
  readonly deferred: readonly string[];
  /** Partitions of the history now, DEFAULT included. */
  readonly partitions: number;
}

const LOCK_NOT_AVAILABLE = '55P03';

/** The gauge the relay sets after each maintenance run (docs/metrics.md, History). */
export const HISTORY_PARTITIONS_METRIC = [
  'tx_outbox_history_partitions',
  'Partitions of the delivery history (daily ones and DEFAULT), as of the last maintenance run.',
] as const;

/**
 * Creates the history's partitions ahead (today and `aheadDays` after, UTC) and drops those
 * older than `retentionDays`, each step in a short transaction of its own with a lock timeout;
 * a step whose lock is not granted in time is left for the next run (`deferred`). Rows that
 * landed in the DEFAULT partition move into the partition created for their day. Concurrent
 * runs (several relays) are serialised by an advisory lock. Needs migration 5 and EXECUTE on
 * the history functions (the relay and operator roles have it).
 */
export async function maintainHistory(
  pool: Pool,
  options: MaintainHistoryOptions = {},
): Promise<HistoryMaintenance> {
  const schema = quoteSchema(options.schema ?? DEFAULT_SCHEMA);
  const retentionDays = boundedInt(options.retentionDays, 7, 'retentionDays', 3650);
  const aheadDays = boundedInt(options.aheadDays, 3, 'aheadDays', 60);
  const lease = await Checkout.of(pool);
  const { client } = lease;
  const created: string[] = [];
  const dropped: string[] = [];
  const deferred: string[] = [];
  let moved = 0;
  let purged = 0;
  try {
    const step = async <T>(what: string, sql: string, values: unknown[]): Promise<T | undefined> => {
      await client.query('BEGIN');
      try {
        await client.query(HISTORY_LOCK_TIMEOUT_SQL);
        const { rows } = await client.query(withSchema(sql, schema), values);
        await client.query('COMMIT');
        return rows[0] as T;
      } catch (error) {
        await client.query('ROLLBACK');
        if ((error as { code?: unknown }).code === LOCK_NOT_AVAILABLE) {
          deferred.push(what);
          return undefined;
        }
        throw error;
      }
    };
    const { rows: plan } = await client.query<{ action: 'create' | 'drop' | 'purge'; day: string }>(
      withSchema(HISTORY_PLAN_SQL, schema),
      [aheadDays, retentionDays],
    );
    for (const { action, day } of plan) {
      if (action === 'create') {
        const r = await step<{ moved: number }>(`create ${day}`, HISTORY_ADD_PARTITION_SQL, [day]);
        if (r && r.moved >= 0) {
          created.push(day);
          moved += r.moved;
        }
      } else if (action === 'drop') {
        const r = await step<{ dropped: boolean }>(`drop ${day}`, HISTORY_DROP_PARTITION_SQL, [
          day,
          retentionDays,
        ]);
        if (r?.dropped) dropped.push(day);
      } else {
        const r = await step<{ purged: number }>('purge default', HISTORY_PURGE_DEFAULT_SQL, [retentionDays]);
        purged += r?.purged ?? 0;
      }
    }
    const { rows } = await client.query<{ partitions: number }>(withSchema(HISTORY_PARTITIONS_SQL, schema));
    lease.release();
    return { created, dropped, moved, purged, deferred, partitions: rows[0]?.partitions ?? 0 };
  } catch (error) {
    lease.release(error ?? true);
    throw error;
  }
}

/** Throws a clear error when the schema predates the history (migration 5). */
export async function checkHistoryTable(pool: Pool, quotedSchema: string): Promise<void> {
  const table = `${quotedSchema}.deliveries`;
  const { rows } = await pool.query<{ present: boolean; insert: boolean | null }>(
    `SELECT to_regclass($1) IS NOT NULL AS present,
            CASE WHEN to_regclass($1) IS NOT NULL THEN has_table_privilege(to_regclass($1), 'INSERT') END AS insert`,
    [table],
  );
  if (!rows[0]?.present) {
    throw new OutboxError(
      `the outbox schema ${quotedSchema} has no deliveries table (migration 5), which history needs; run migrate first`,
      { code: 'TXO_NO_SCHEMA' },
    );
  }
  // Without it every outcome statement would fail: the batch republished again and again, never recorded.
  if (!rows[0].insert) {
    throw new OutboxError(
      `the relay's database role may not INSERT into ${table}, which history needs; re-run the grants of \`tx-outbox roles --print-sql\` (the relay role gets it) or turn history off`,
      { code: 'TXO_NO_PRIVILEGE' },
    );
  }
}

/**
 * The relay's background maintenance: a run at start, awaited before the relay's first batch,
 * then one every `maintenanceIntervalMs`. A failed run (database down, a lock not granted) is
 * logged and tried again next time; it never fails or stops the relay. The timer does not keep
 * the process alive.
 *
 * Why the first run is awaited: a row routed to DEFAULT while the partition of its day is
 * being attached fails its statement ("violates partition constraint": PostgreSQL re-checks
 * DEFAULT's constraint after the concurrent ATTACH). On a fresh schema every outcome would go
 * to DEFAULT until the first run; with today's partition in place first, that can only happen
 * after maintenance failed for longer than `aheadDays`, and then costs one retried batch.
 */
export class HistoryMaintainer {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly schema: string,
    private readonly history: ResolvedHistory,
    private readonly logger: Logger,
    private readonly relayId: string,
    /** `tx_outbox_history_partitions`, set after every run (metrics on). */
    private readonly partitions?: GaugeMetric,
  ) {}

  /** Runs the maintenance once (never throws) and schedules the next runs; idempotent. */
  async start(): Promise<void> {
    if (this.timer) return;
    this.timer = setInterval(() => void this.run(), this.history.maintenanceIntervalMs);
    this.timer.unref();
    await this.run();
  }

  /** Stops the timer and waits for a run in flight. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }

  private run(): Promise<void> {
    this.running ??= maintainHistory(this.pool, {
      schema: this.schema,
      retentionDays: this.history.retentionDays,
      aheadDays: this.history.aheadDays,
    })
      .then((done) => {
        this.partitions?.set(undefined, done.partitions);
        if (done.created.length + done.dropped.length + done.purged > 0) {
          this.logger.info({ relayId: this.relayId, ...done }, 'delivery history maintained');
        }
        if (done.deferred.length > 0) {
          this.logger.warn(
            { relayId: this.relayId, deferred: done.deferred },
            'delivery history: a lock was not granted in time; trying again next run',
          );
        }
      })
      .catch((error: unknown) => {
        this.logger.warn(
          { err: error, relayId: this.relayId },
          'delivery history maintenance failed; trying again next run',
        );
      })
      .finally(() => {
        this.running = undefined;
      });
    return this.running;
  }
}
