import { CHAIN_END_GONE } from '../core/gate-sql.js';

/**
 * The pruner's statements (docs/schema.md, Bounded tables); `{{schema}}` is the validated,
 * quoted schema name. Every delete is one bounded batch in a short transaction of its own,
 * taking rows `FOR UPDATE SKIP LOCKED`: it never waits on a producer, relay or consumer that
 * holds one. Retentions come in as milliseconds ($1).
 */

/** One pruner per schema: a session advisory lock on a key derived from the schema name ($1). */
export const TRY_LOCK_SQL = `SELECT pg_try_advisory_lock(hashtextextended('tx-outbox prune ' || $1::text, 0)) AS locked`;
export const UNLOCK_SQL = `SELECT pg_advisory_unlock(hashtextextended('tx-outbox prune ' || $1::text, 0))`;

/** The sequence floor now. */
export const FLOOR_SQL = `SELECT last_value::text AS floor FROM {{schema}}.sequence_floor`;

/**
 * Raises the floor to at least $1 (never lowers it). A sequence: visible to every producer at
 * once, before the delete that follows commits, whatever their snapshots.
 */
export const RAISE_FLOOR_SQL = `
SELECT setval('{{schema}}.sequence_floor', greatest(last_value, $1::bigint))::text AS floor
FROM {{schema}}.sequence_floor`;

/**
 * A window over a table in key order: the key of its `$1`-th row after the cursor (`{{after}}`),
 * or nothing when fewer rows are left (the window runs to the end). Walking the primary key in
 * windows makes a full pass O(rows) however few of them go, and no index is needed beyond it.
 */
export const WINDOW_END_SQL = `
SELECT {{key}} FROM {{schema}}.{{table}} WHERE {{after}}
ORDER BY {{key}} OFFSET $1 - 1 LIMIT 1`;

/**
 * Everything an aggregate's sequence row handed out is delivered: the last event of its chain
 * (015_previous_id.sql) has left the table — the gate passes no event before its previous one
 * has, so every earlier one has too — or, where the chain is not whole (events gated by
 * sequence), the relay recorded the last sequence delivered. Not blocked (a dead or backing-off
 * head). `s` the sequence row, `g` its progress row (left-joined).
 */
const FULLY_DELIVERED = `
  AND ((s.last_id_sequence = s.last_sequence AND ${CHAIN_END_GONE})
       OR g.delivered_sequence >= s.last_sequence)
  AND (g.blocked_until IS NULL OR g.blocked_until <= now())`;

/**
 * The idle, fully delivered aggregates of one window ({@link FULLY_DELIVERED}), locked: last
 * written before the retention ($1 ms), and the sequence row locked by nobody (a producer
 * writing). Cursor $2.., window end after it. An aggregate whose last event is still in the
 * table, or without a whole chain and a progress row, has undelivered events: never picked.
 */
export const IDLE_AGGREGATES_SQL = `
SELECT s.aggregate_type, s.aggregate_id, s.last_sequence::text AS last_sequence
FROM {{schema}}.aggregate_sequences s
LEFT JOIN {{schema}}.aggregate_progress g ON g.aggregate_type = s.aggregate_type AND g.aggregate_id = s.aggregate_id
WHERE {{after}} AND {{upto}}
  AND s.written_at < now() - $1 * interval '1 millisecond'${FULLY_DELIVERED}
FOR UPDATE OF s SKIP LOCKED`;
/** Deletes the picked aggregates' rows (both tables), after the floor was raised above them. */
export const DELETE_AGGREGATES_SQL = `
WITH picked AS (
  SELECT * FROM unnest($1::text[], $2::text[]) AS v(aggregate_type, aggregate_id)
), progress AS (
  DELETE FROM {{schema}}.aggregate_progress g USING picked v
  WHERE g.aggregate_type = v.aggregate_type AND g.aggregate_id = v.aggregate_id
  RETURNING 1
), sequences AS (
  DELETE FROM {{schema}}.aggregate_sequences s USING picked v
  WHERE s.aggregate_type = v.aggregate_type AND s.aggregate_id = v.aggregate_id
  RETURNING 1
)
SELECT (SELECT count(*) FROM sequences)::int AS sequences, (SELECT count(*) FROM progress)::int AS progress`;

/**
 * What a dry run would prune of the aggregates (a full count: an operator's question, not the hot
 * path): sequence rows `n`, and the progress rows among them.
 */
export const COUNT_IDLE_AGGREGATES_SQL = `
SELECT count(*)::int AS n, count(g.aggregate_type)::int AS progress
FROM {{schema}}.aggregate_sequences s
LEFT JOIN {{schema}}.aggregate_progress g ON g.aggregate_type = s.aggregate_type AND g.aggregate_id = s.aggregate_id
WHERE s.written_at < now() - $1 * interval '1 millisecond'${FULLY_DELIVERED}`;
/**
 * Progress rows of aggregates on caller versions (no `aggregate_sequences` row: the producer
 * writes the event row only) of one window, locked: the relay last recorded an outcome of the
 * aggregate before the retention ($1 ms), and it is not blocked. Cursor $2.., window end after
 * it. Taken `FOR UPDATE SKIP LOCKED`: a relay recording the aggregate now (its upsert locks the
 * row) is skipped; one that recorded it since has moved `delivered_at`, which the lock re-checks.
 * The events of the picked aggregates are looked up next ({@link PROGRESS_IN_USE_SQL}).
 */
export const IDLE_PROGRESS_SQL = `
SELECT g.aggregate_type, g.aggregate_id
FROM {{schema}}.aggregate_progress g
WHERE {{after}} AND {{upto}}
  AND g.delivered_at < now() - $1 * interval '1 millisecond'
  AND (g.blocked_until IS NULL OR g.blocked_until <= now())
  AND NOT EXISTS (
    SELECT 1 FROM {{schema}}.aggregate_sequences s
    WHERE s.aggregate_type = g.aggregate_type AND s.aggregate_id = g.aggregate_id)
FOR UPDATE OF g SKIP LOCKED`;

/**
 * Which of the picked aggregates (`$1`: keys `type chr(31) id`) still have an event in the
 * table, in any status. Their progress stays: without it the gate would start them at 0, so a
 * repeat left in the table (at or below delivered) would no longer be one — it would hold the
 * next version back as "earlier", or be bridged and published. `events` has no index on the
 * aggregate (and must not get one: every index costs every producer's insert), so this is one
 * scan of the table per window that picked anything, the keys matched by a hashed array: the
 * events table holds only what is not delivered yet.
 */
export const PROGRESS_IN_USE_SQL = `
SELECT DISTINCT e.aggregate_type || chr(31) || e.aggregate_id AS key
FROM {{schema}}.events e
WHERE (e.aggregate_type || chr(31) || e.aggregate_id) = ANY ($1::text[])`;

/**
 * Deletes the picked progress rows (`$1`/`$2`), locked by {@link IDLE_PROGRESS_SQL} in this
 * transaction, whose `delivered_at` is still before the retention ($3 ms).
 */
export const DELETE_PROGRESS_SQL = `
DELETE FROM {{schema}}.aggregate_progress g
USING unnest($1::text[], $2::text[]) AS v(aggregate_type, aggregate_id)
WHERE g.aggregate_type = v.aggregate_type AND g.aggregate_id = v.aggregate_id
  AND g.delivered_at < now() - $3 * interval '1 millisecond'`;

/** What a dry run would prune of caller versions' progress rows (a full count, events scanned once). */
export const COUNT_IDLE_PROGRESS_SQL = `
SELECT count(*)::int AS n FROM {{schema}}.aggregate_progress g
WHERE g.delivered_at < now() - $1 * interval '1 millisecond'
  AND (g.blocked_until IS NULL OR g.blocked_until <= now())
  AND NOT EXISTS (
    SELECT 1 FROM {{schema}}.aggregate_sequences s
    WHERE s.aggregate_type = g.aggregate_type AND s.aggregate_id = g.aggregate_id)
  AND NOT EXISTS (
    SELECT 1 FROM {{schema}}.events e
    WHERE e.aggregate_type = g.aggregate_type AND e.aggregate_id = g.aggregate_id)`;

/**
 * Inbox positions of one window untouched for the retention ($1 ms), unless a message of their
 * aggregate is still quarantined unreleased (its release would find the aggregate unknown).
 */
export const IDLE_POSITIONS_SQL = `
SELECT p.consumer, p.aggregate_type, p.aggregate_id
FROM {{schema}}.inbox_positions p
WHERE {{after}} AND {{upto}}
  AND p.updated_at < now() - $1 * interval '1 millisecond'
  AND NOT EXISTS (
    SELECT 1 FROM {{schema}}.inbox_quarantine q
    WHERE q.consumer = p.consumer AND q.aggregate_type = p.aggregate_type AND q.aggregate_id = p.aggregate_id
      AND q.released_at IS NULL)
FOR UPDATE OF p SKIP LOCKED`;

export const DELETE_POSITIONS_SQL = `
DELETE FROM {{schema}}.inbox_positions p
USING unnest($1::text[], $2::text[], $3::text[]) AS v(consumer, aggregate_type, aggregate_id)
WHERE p.consumer = v.consumer AND p.aggregate_type = v.aggregate_type AND p.aggregate_id = v.aggregate_id`;

export const COUNT_IDLE_POSITIONS_SQL = `
SELECT count(*)::int AS n FROM {{schema}}.inbox_positions p
WHERE p.updated_at < now() - $1 * interval '1 millisecond'
  AND NOT EXISTS (
    SELECT 1 FROM {{schema}}.inbox_quarantine q
    WHERE q.consumer = p.consumer AND q.aggregate_type = p.aggregate_type AND q.aggregate_id = p.aggregate_id
      AND q.released_at IS NULL)`;

/** A table pruned by age alone: its key, and which rows are old ($1 ms). */
export interface AgedTable {
  readonly table: string;
  readonly key: string;
  readonly old: string;
  /** The rows a batch looks at (default: any old rows); the audit trail walks its id order. */
  readonly scope?: string;
  /**
   * Rows someone else may hold (a relay's heartbeat, a consumer's attempt count): taken
   * `FOR UPDATE SKIP LOCKED`. Insert-only tables (audit, dedup records) need no lock.
   */
  readonly locked: boolean;
}

const older = (column: string) => `${column} < now() - $1 * interval '1 millisecond'`;

export const RELAYS: AgedTable = {
  table: 'relays',
  key: 'relay_id',
  old: older('heartbeat_at'),
  locked: true,
};
/** The audit trail is appended in id order: a batch looks at its first $2 rows only. */
export const AUDIT: AgedTable = {
  table: 'audit',
  key: 'id',
  old: older('at'),
  scope: 'id IN (SELECT id FROM {{schema}}.audit ORDER BY id LIMIT $2)',
  locked: false,
};
/** Dedup records: the BRIN index on processed_at finds the old ranges. */
export const INBOX: AgedTable = {
  table: 'inbox',
  key: 'consumer, event_id',
  old: older('processed_at'),
  locked: false,
};
export const INBOX_ATTEMPTS: AgedTable = {
  table: 'inbox_attempts',
  key: 'consumer, event_id',
  old: older('last_at'),
  locked: true,
};
/** Released quarantined messages only: a parked one waits for an operator, however old. */
export const INBOX_RELEASED: AgedTable = {
  table: 'inbox_quarantine',
  key: 'id',
  old: `released_at IS NOT NULL AND ${older('released_at')}`,
  locked: true,
};

/** One batch of an aged table: at most $2 old rows nobody holds. */
export function deleteAgedSql(t: AgedTable): string {
  const where = t.scope === undefined ? t.old : `${t.scope} AND ${t.old}`;
  return `
DELETE FROM {{schema}}.${t.table} WHERE (${t.key}) IN (
  SELECT ${t.key} FROM {{schema}}.${t.table} WHERE ${where} LIMIT $2${t.locked ? ' FOR UPDATE SKIP LOCKED' : ''})`;
}

export function countAgedSql(t: AgedTable): string {
  return `SELECT count(*)::int AS n FROM {{schema}}.${t.table} WHERE ${t.old}`;
}

/**
 * Whether the session's role may prune the audit trail and the inbox tables (`{{schema}}`-qualified
 * names, read as text): the relay's background pruner asks before a run that is configured to, so
 * that a relay role granted neither (`tx-outbox roles` without `--relay-prunes`) skips them with
 * one warning instead of failing every run.
 */
export const PRUNE_RIGHTS_SQL = `
SELECT has_table_privilege('{{schema}}.audit', 'DELETE') AS audit,
       has_table_privilege('{{schema}}.inbox', 'DELETE')
         AND has_table_privilege('{{schema}}.inbox_positions', 'DELETE')
         AND has_table_privilege('{{schema}}.inbox_attempts', 'DELETE')
         AND has_table_privilege('{{schema}}.inbox_quarantine', 'DELETE') AS inbox`;
