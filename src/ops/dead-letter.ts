/**
 * Dead events: list them, and replay them with a reason once the cause is fixed.
 * A replay puts the events back to pending, unblocks their aggregates, records
 * who did it and why in the audit table, and wakes sleeping relays, in one
 * transaction.
 */
import type { Pool } from 'pg';
import { OutboxValidationError } from '../errors.js';
import { wakeChannel } from '../producer/enqueue-sql.js';
import { inTransaction } from '../producer/transaction.js';
import { redactText } from '../redact.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';

export interface DeadEvent {
  readonly eventId: string;
  readonly aggregateType: string;
  readonly aggregateId: string;
  readonly sequence: number;
  readonly type: string;
  readonly topic: string | null;
  readonly attempts: number;
  readonly lastError: string | null;
  readonly createdAt: Date;
  readonly deadAt: Date | null;
}

export const LIST_DEAD_SQL = `
SELECT event_id::text AS event_id, aggregate_type, aggregate_id, sequence::text AS sequence, event_type, topic,
       attempts, last_error, created_at, dead_at
FROM {{schema}}.events
WHERE status = 'dead'
ORDER BY dead_at, id
LIMIT $1`;

/** `$1` event ids (NULL: every dead event), `$2` actor, `$3` reason. */
export const REPLAY_DEAD_SQL = `
WITH replayed AS (
  UPDATE {{schema}}.events
  SET status = 'pending', attempts = 0, next_attempt_at = now(), dead_at = NULL
  WHERE status = 'dead' AND ($1::uuid[] IS NULL OR event_id = ANY ($1::uuid[]))
  RETURNING event_id, aggregate_type, aggregate_id
), unblocked AS (
  UPDATE {{schema}}.aggregate_progress p
  SET blocked_until = NULL
  FROM (SELECT DISTINCT aggregate_type, aggregate_id FROM replayed) r
  WHERE p.aggregate_type = r.aggregate_type AND p.aggregate_id = r.aggregate_id
), audited AS (
  INSERT INTO {{schema}}.audit (actor, action, event_ids, reason)
  SELECT $2, 'replay', array_agg(event_id), $3 FROM replayed HAVING count(*) > 0
)
SELECT event_id::text AS event_id FROM replayed`;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export async function listDead(
  pool: Pool,
  options: { schema?: string; limit?: number } = {},
): Promise<DeadEvent[]> {
  const schema = quoteSchema(options.schema ?? DEFAULT_SCHEMA);
  const { rows } = await pool.query(withSchema(LIST_DEAD_SQL, schema), [options.limit ?? 100]);
  return rows.map((r) => ({
    eventId: r.event_id,
    aggregateType: r.aggregate_type,
    aggregateId: r.aggregate_id,
    sequence: Number(r.sequence),
    type: r.event_type,
    topic: r.topic,
    attempts: r.attempts,
    // The relay records errors redacted; older rows may still quote a URL with its secrets.
    lastError: r.last_error === null ? null : redactText(r.last_error),
    createdAt: r.created_at,
    deadAt: r.dead_at,
  }));
}

export interface ReplayOptions {
  readonly schema?: string;
  /** The dead events to replay; `'all'` replays every dead event. */
  readonly eventIds: readonly string[] | 'all';
  /** Why: kept in the audit table. Required. */
  readonly reason: string;
  /** Who: kept in the audit table. Default the database user. */
  readonly actor?: string;
}

/** Puts dead events back to pending; returns the ids replayed (ids that were not dead are ignored). */
export async function replayDead(pool: Pool, options: ReplayOptions): Promise<string[]> {
  const schemaName = options.schema ?? DEFAULT_SCHEMA;
  const schema = quoteSchema(schemaName);
  if (typeof options.reason !== 'string' || options.reason.trim().length === 0) {
    throw new OutboxValidationError(
      'reason',
      'is missing',
      'Say why the events are replayed; it is audited.',
    );
  }
  const ids = options.eventIds === 'all' ? null : [...options.eventIds];
  if (ids !== null) {
    if (ids.length === 0) {
      throw new OutboxValidationError('eventIds', 'is empty', "Pass the dead events' ids, or 'all'.");
    }
    const bad = ids.find((id) => !UUID.test(id));
    if (bad !== undefined) {
      throw new OutboxValidationError('eventIds', `${JSON.stringify(bad)} is not a UUID`, 'Pass event ids.');
    }
  }
  return inTransaction(pool, async (client) => {
    const actor = options.actor ?? (await client.query<{ u: string }>('SELECT current_user AS u')).rows[0]!.u;
    const { rows } = await client.query<{ event_id: string }>(withSchema(REPLAY_DEAD_SQL, schema), [
      ids,
      actor,
      options.reason.trim(),
    ]);
    if (rows.length > 0) await client.query('SELECT pg_notify($1, $2)', [wakeChannel(schemaName), '']);
    return rows.map((r) => r.event_id);
  });
}
