/**
 * The backlog of an outbox, read at a cost of O(partitions), never a scan of the events table:
 * a bounded sample at the head of the pending events (through a partial index), the exact dead
 * count kept per partition by triggers, and PostgreSQL's live-row statistics for the total (see
 * {@link readBacklog}); neither the backlog nor the dead events make it dearer. Ages come from the
 * database clock (`now()`), never this host's.
 */

import type { Pool } from 'pg';
import { OutboxError, OutboxValidationError } from '../errors.js';
import { inTransaction } from '../producer/transaction.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import { BACKLOG_PLANNER_SQL, EXACT_BACKLOG_SQL, READ_BACKLOG_SQL } from './backlog-sql.js';

/** Pending events read at the head of the events table, in id order. Default of `sampleSize`. */
export const DEFAULT_SAMPLE_SIZE = 10_000;
const MAX_SAMPLE_SIZE = 1_000_000;

/** One outbox partition: its lease and its share of the backlog. */
export interface PartitionBacklog {
  readonly partition: number;
  /** Relay holding the lease, or null when the partition is free. */
  readonly owner: string | null;
  /** Fencing token, raised on every change of owner. */
  readonly epoch: number;
  /** Seconds until the lease runs out (negative: expired, up for takeover); null without an owner. */
  readonly leaseExpiresInSeconds: number | null;
  /**
   * Pending events of this partition. Estimated (see {@link Backlog.exact}): the partition's
   * share of the pending events in the head sample, scaled to the total.
   */
  readonly pending: number;
  /**
   * Age of the partition's oldest DUE pending event (status pending, its `deliverAfter` reached;
   * measured from the later of `created_at` and `deliverAfter`: a future `deliverAfter` is not lag,
   * a retry backoff is), in seconds; null when none is due.
   * When estimated, null also for a partition with no due event among the sampled head rows:
   * its oldest due event, if any, is younger than {@link Backlog.sampleHorizonAgeSeconds}.
   */
  readonly oldestPendingAgeSeconds: number | null;
}

/** One registered relay instance. */
export interface RelayInstanceStatus {
  readonly relayId: string;
  readonly host: string;
  readonly pid: number;
  readonly lastHeartbeatSecondsAgo: number;
  /** Heartbeat within the relay's own lease: it counts in {@link Backlog.relaysLive}. */
  readonly live: boolean;
}

/** The backlog of one outbox schema, see {@link readBacklog}. */
export interface Backlog {
  /**
   * True when every figure is an exact count: the events table held fewer pending events than
   * the sample, so the sample was all of them. False: `pending` is PostgreSQL's live-row
   * estimate minus the dead events, and the per-partition counts are scaled from the sample.
   * `dead`, `partitionsUnowned` and `relaysLive` are exact either way.
   */
  readonly exact: boolean;
  /** Pending events read at the head of the events table (at most `sampleSize`). */
  readonly sampled: number;
  /** Events waiting to be published (status pending, including those being retried or not due yet). */
  readonly pending: number;
  /**
   * Age of the oldest DUE pending event (from its `created_at`), in seconds; null when none is
   * due. Exact as long as a due event is among the sampled head rows (ids follow commit order);
   * null when estimated and none of them is due (a head of `sampleSize` backing-off or deferred
   * events: raise `sampleSize`). Dead events are not in the sample and never hide it.
   */
  readonly oldestPendingAgeSeconds: number | null;
  /** Age of the youngest sampled row: the horizon of the sample. Null for an empty table. */
  readonly sampleHorizonAgeSeconds: number | null;
  /** Events that ran out of attempts (exact, from the per-partition counts); each blocks its aggregate until replayed. */
  readonly dead: number;
  /** Pending events that failed at least once (attempts > 0), counted in the head sample. */
  readonly retrying: number;
  /** Partitions whose lease has no live owner (free or expired): nobody publishes their events. */
  readonly partitionsUnowned: number;
  /** Relays whose heartbeat is within their own lease. */
  readonly relaysLive: number;
  readonly partitions: readonly PartitionBacklog[];
  readonly relays: readonly RelayInstanceStatus[];
}

export interface ReadBacklogOptions {
  /** Outbox schema. Default `outbox`. */
  readonly schema?: string;
  /**
   * Pending events sampled at the head, in id order (through the partial index of the pending
   * events: dead ones ahead of them are not walked past): the read never walks further.
   * Default 10,000.
   */
  readonly sampleSize?: number;
  /**
   * Count every row instead (a scan of the events table: seconds at millions of rows, for an
   * operator who asked for it, never for a scrape). The result has `exact: true`.
   */
  readonly exact?: boolean;
}

interface SampleEntry {
  partition: number;
  pending: string | number;
  oldestDueAge: number | null;
}

interface BacklogRow {
  sampled: string;
  retrying: string;
  dead: string;
  live: string;
  horizon_age: number | null;
  sample: SampleEntry[];
  partitions: {
    partition: number;
    owner: string | null;
    epoch: string | number;
    leaseExpiresInSeconds: number | null;
  }[];
  relays: RelayInstanceStatus[];
}

interface ExactRow {
  partition: number;
  pending: string;
  retrying: string;
  oldest_due_age: number | null;
}

/** PostgreSQL error codes meaning "that schema or table is not there". */
const MISSING_OBJECT_CODES = new Set(['3F000', '42P01']);

/**
 * Reads the backlog of the outbox in `schema` with one query whose cost is bounded by
 * `sampleSize` and the partitions — not by the backlog, nor by the dead events. With 1,000,000
 * pending events it answers in a few milliseconds (docs/performance.md).
 *
 * @throws OutboxValidationError when the schema name or `sampleSize` is invalid.
 * @throws OutboxError `TXO_NO_SCHEMA` when the outbox tables are not there (run `tx-outbox migrate`).
 */
export async function readBacklog(pool: Pool, options: ReadBacklogOptions = {}): Promise<Backlog> {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const quoted = quoteSchema(schema);
  const sampleSize = checkSampleSize(options.sampleSize ?? DEFAULT_SAMPLE_SIZE);
  let row: BacklogRow | undefined;
  let exactRows: ExactRow[] | undefined;
  try {
    row = await inTransaction(
      pool,
      async (client) => {
        await client.query(BACKLOG_PLANNER_SQL);
        return (await client.query<BacklogRow>(withSchema(READ_BACKLOG_SQL, quoted), [sampleSize])).rows[0];
      },
      'BEGIN READ ONLY',
    );
    if (options.exact) exactRows = (await pool.query<ExactRow>(withSchema(EXACT_BACKLOG_SQL, quoted))).rows;
  } catch (error) {
    throw isMissingObject(error) ? noSchema(schema, error) : error;
  }
  if (!row) throw noSchema(schema, undefined);
  return exactRows ? fromExact(row, exactRows) : fromSample(row, sampleSize);
}

function fromSample(row: BacklogRow, sampleSize: number): Backlog {
  const sampled = Number(row.sampled);
  const dead = Number(row.dead);
  const exact = sampled < sampleSize;
  const inSample = new Map(row.sample.map((s) => [s.partition, s]));
  const samplePending = row.sample.reduce((sum, s) => sum + Number(s.pending), 0);
  // The statistics lag a second behind the commits, and reset to zero on a crash or pg_stat_reset:
  // never report fewer than the sample holds.
  const pending = exact ? samplePending : Math.max(Number(row.live) - dead, samplePending);
  const scale = samplePending === 0 ? 0 : pending / samplePending;
  const partitions = row.partitions.map((p) => {
    const s = inSample.get(p.partition);
    return {
      ...lease(p),
      pending: s ? Math.round(Number(s.pending) * scale) : 0,
      oldestPendingAgeSeconds: roundSeconds(s?.oldestDueAge ?? null),
    };
  });
  return summary(row, { exact, sampled, pending, dead, retrying: Number(row.retrying), partitions });
}

function fromExact(row: BacklogRow, counts: readonly ExactRow[]): Backlog {
  const byPartition = new Map(counts.map((c) => [c.partition, c]));
  const partitions = row.partitions.map((p) => {
    const c = byPartition.get(p.partition);
    return {
      ...lease(p),
      pending: Number(c?.pending ?? 0),
      oldestPendingAgeSeconds: roundSeconds(c?.oldest_due_age ?? null),
    };
  });
  return summary(row, {
    exact: true,
    sampled: Number(row.sampled),
    pending: partitions.reduce((sum, p) => sum + p.pending, 0),
    dead: Number(row.dead),
    retrying: counts.reduce((sum, c) => sum + Number(c.retrying), 0),
    partitions,
  });
}

function summary(
  row: BacklogRow,
  figures: Pick<Backlog, 'exact' | 'sampled' | 'pending' | 'dead' | 'retrying' | 'partitions'>,
): Backlog {
  const ages = figures.partitions
    .map((p) => p.oldestPendingAgeSeconds)
    .filter((a): a is number => a !== null);
  const relays = row.relays.map((r) => ({
    ...r,
    lastHeartbeatSecondsAgo: roundSeconds(r.lastHeartbeatSecondsAgo) ?? 0,
  }));
  return {
    ...figures,
    oldestPendingAgeSeconds: ages.length === 0 ? null : Math.max(...ages),
    sampleHorizonAgeSeconds: roundSeconds(row.horizon_age),
    partitionsUnowned: figures.partitions.filter(
      (p) => p.owner === null || p.leaseExpiresInSeconds === null || p.leaseExpiresInSeconds < 0,
    ).length,
    relaysLive: relays.filter((r) => r.live).length,
    relays,
  };
}

function lease(
  p: BacklogRow['partitions'][number],
): Omit<PartitionBacklog, 'pending' | 'oldestPendingAgeSeconds'> {
  return {
    partition: p.partition,
    owner: p.owner,
    epoch: Number(p.epoch),
    leaseExpiresInSeconds: roundSeconds(p.leaseExpiresInSeconds),
  };
}

function checkSampleSize(value: number): number {
  if (!Number.isInteger(value) || value < 1 || value > MAX_SAMPLE_SIZE) {
    throw new OutboxValidationError(
      'sampleSize',
      `is ${String(value)}`,
      `Pass an integer from 1 to ${MAX_SAMPLE_SIZE} (default ${DEFAULT_SAMPLE_SIZE}).`,
    );
  }
  return value;
}

function isMissingObject(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && MISSING_OBJECT_CODES.has(code);
}

/** The outbox tables (or those of migrations 8 and 14) are not there. */
export function noSchema(schema: string, cause: unknown): OutboxError {
  const command = schema === DEFAULT_SCHEMA ? 'tx-outbox migrate' : `tx-outbox migrate --schema ${schema}`;
  return new OutboxError(
    `no outbox found in schema "${schema}" of this database: run \`${command}\` first (or migrate(pool) in code)`,
    { code: 'TXO_NO_SCHEMA', cause },
  );
}

/** Milliseconds are enough for an age; null stays null. */
function roundSeconds(seconds: number | null): number | null {
  return seconds === null ? null : Math.round(seconds * 1000) / 1000;
}
