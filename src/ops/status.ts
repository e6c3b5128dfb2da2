/**
 * A point-in-time view of an outbox: backlog, failures, partition owners and
 * live relays. Ages come from the database clock (`now()`), never this host's.
 */

import type { Pool } from 'pg';
import { OutboxError } from '../errors.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';

/** One outbox partition and its lease. */
export interface PartitionStatus {
  readonly partition: number;
  /** Relay holding the lease, or null when the partition is free. */
  readonly owner: string | null;
  /** Fencing token, raised on every change of owner. */
  readonly epoch: number;
  /** Seconds until the lease runs out (negative: expired, up for takeover); null without an owner. */
  readonly leaseExpiresInSeconds: number | null;
}

/** One registered relay instance. */
export interface RelayInstanceStatus {
  readonly relayId: string;
  readonly host: string;
  readonly pid: number;
  readonly lastHeartbeatSecondsAgo: number;
}

/** The state of one outbox schema, see {@link outboxStatus}. */
export interface OutboxStatus {
  /** Events waiting to be published (status pending, including those being retried). */
  readonly pending: number;
  /** Age of the oldest pending event (from its `created_at`), in seconds; null when nothing is pending. */
  readonly oldestPendingAgeSeconds: number | null;
  /** Events that ran out of attempts; each blocks its aggregate until replayed. */
  readonly dead: number;
  /** Pending events that failed at least once (attempts > 0). */
  readonly retrying: number;
  readonly partitions: readonly PartitionStatus[];
  readonly relays: readonly RelayInstanceStatus[];
}

export interface OutboxStatusOptions {
  /** Outbox schema. Default `outbox`. */
  readonly schema?: string;
}

/** Backlog counters and the oldest pending age, in one pass over the hot table. */
export const STATUS_COUNTS_SQL = `
SELECT
  count(*) FILTER (WHERE status = 'pending')::int8 AS pending,
  count(*) FILTER (WHERE status = 'dead')::int8 AS dead,
  count(*) FILTER (WHERE status = 'pending' AND attempts > 0)::int8 AS retrying,
  extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 'pending'))::float8 AS oldest_age,
  (SELECT coalesce(json_agg(json_build_object(
      'partition', p.partition,
      'owner', p.owner,
      'epoch', p.epoch,
      'leaseExpiresInSeconds',
        CASE WHEN p.owner IS NULL THEN NULL ELSE extract(epoch FROM p.lease_until - now())::float8 END
    ) ORDER BY p.partition), '[]'::json)
   FROM {{schema}}.partitions p) AS partitions,
  (SELECT coalesce(json_agg(json_build_object(
      'relayId', r.relay_id,
      'host', r.host,
      'pid', r.pid,
      'lastHeartbeatSecondsAgo', extract(epoch FROM now() - r.heartbeat_at)::float8
    ) ORDER BY r.relay_id), '[]'::json)
   FROM {{schema}}.relays r) AS relays
FROM {{schema}}.events`;

/** PostgreSQL error codes meaning "that schema or table is not there". */
const MISSING_OBJECT_CODES = new Set(['3F000', '42P01']);

interface CountsRow {
  pending: string;
  dead: string;
  retrying: string;
  oldest_age: number | null;
  partitions: PartitionStatus[];
  relays: RelayInstanceStatus[];
}

/**
 * Reads the status of the outbox in `schema` with one query.
 *
 * @throws OutboxValidationError when the schema name is invalid.
 * @throws OutboxError `TXO_NO_SCHEMA` when the outbox tables are not there (run `tx-outbox migrate`).
 */
export async function outboxStatus(pool: Pool, options: OutboxStatusOptions = {}): Promise<OutboxStatus> {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const sql = withSchema(STATUS_COUNTS_SQL, quoteSchema(schema));
  let rows: CountsRow[];
  try {
    rows = (await pool.query<CountsRow>(sql)).rows;
  } catch (error) {
    throw isMissingObject(error) ? noSchema(schema, error) : error;
  }
  const row = rows[0];
  if (!row) throw noSchema(schema, undefined);
  return {
    pending: Number(row.pending),
    oldestPendingAgeSeconds: roundSeconds(row.oldest_age),
    dead: Number(row.dead),
    retrying: Number(row.retrying),
    partitions: row.partitions.map((p) => ({
      partition: p.partition,
      owner: p.owner,
      epoch: Number(p.epoch),
      leaseExpiresInSeconds: roundSeconds(p.leaseExpiresInSeconds),
    })),
    relays: row.relays.map((r) => ({
      ...r,
      lastHeartbeatSecondsAgo: roundSeconds(r.lastHeartbeatSecondsAgo) ?? 0,
    })),
  };
}

function isMissingObject(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && MISSING_OBJECT_CODES.has(code);
}

function noSchema(schema: string, cause: unknown): OutboxError {
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
