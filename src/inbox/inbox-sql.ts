/** The inbox's statements; `{{schema}}` is the validated, quoted schema name. */
import { GAP_NOT_FILLED } from './ordering.js';

/** The dedup record: no row back means this consumer already has the event. */
export const CLAIM_EVENT_SQL = `
INSERT INTO {{schema}}.inbox (consumer, event_id, aggregate_type, aggregate_id, sequence, outcome)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (consumer, event_id) DO NOTHING
RETURNING event_id`;

/**
 * Counts a handler failure; returns the count. A count of gap deferrals before (gap_after set)
 * starts again: deliveries spent waiting for a predecessor are not failures.
 */
export const COUNT_ATTEMPT_SQL = `
INSERT INTO {{schema}}.inbox_attempts AS a (consumer, event_id, attempts, last_reason)
VALUES ($1, $2, 1, $3)
ON CONFLICT (consumer, event_id) DO UPDATE
SET attempts = CASE WHEN a.gap_after IS NULL THEN a.attempts + 1 ELSE 1 END,
    first_at = CASE WHEN a.gap_after IS NULL THEN a.first_at ELSE now() END,
    gap_after = NULL, last_at = now(), last_reason = excluded.last_reason
RETURNING attempts`;

/**
 * Counts a deferral on a gap, while the aggregate stands at sequence $4; returns the deliveries
 * and the waiting observed since the count started: the time since the previous deferral, at
 * most $5 ms (an outage between two deliveries is not waiting), added to what was waited before,
 * on the database's clock. The count restarts when the aggregate stood elsewhere at the previous
 * deferral (it advanced: the gap shrank) or the count was of handler failures.
 */
export const COUNT_DEFERRAL_SQL = `
INSERT INTO {{schema}}.inbox_attempts AS a (consumer, event_id, attempts, last_reason, gap_after)
VALUES ($1, $2, 1, $3, $4)
ON CONFLICT (consumer, event_id) DO UPDATE
SET attempts = CASE WHEN a.gap_after = excluded.gap_after THEN a.attempts + 1 ELSE 1 END,
    first_at = CASE WHEN a.gap_after = excluded.gap_after THEN a.first_at ELSE now() END,
    waited_ms = CASE WHEN a.gap_after = excluded.gap_after
      THEN a.waited_ms + least(greatest(extract(epoch FROM now() - a.last_at) * 1000, 0), $5::bigint)::bigint
      ELSE 0 END,
    gap_after = excluded.gap_after, last_at = now(), last_reason = excluded.last_reason
RETURNING attempts, waited_ms::text AS waited_ms`;

/**
 * The first quarantined event of the aggregate between the sequence it stands at ($4) and the
 * deferred one ($5): what a strict gap waits behind, if anything; and whether it was released
 * (replayReleased will apply it).
 */
export const BLOCKER_SQL = `
SELECT event_id::text AS event_id, sequence::text AS sequence, released_at IS NOT NULL AS released
FROM {{schema}}.inbox_quarantine
WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3 AND sequence > $4 AND sequence < $5
ORDER BY sequence
LIMIT 1`;

/**
 * Locks the aggregate's position row (created at 0 when the consumer has none yet) and returns the
 * sequence it stands at: a strict gap's event is parked under this lock, which the claim of any
 * event of the aggregate waits for.
 */
export const LOCK_POSITION_SQL = `
INSERT INTO {{schema}}.inbox_positions AS p (consumer, aggregate_type, aggregate_id, last_sequence, previous_sequence)
VALUES ($1, $2, $3, 0, 0)
ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE SET last_sequence = p.last_sequence, updated_at = now()
RETURNING last_sequence::text AS last_sequence`;

/**
 * Parks a message: $12 the quarantined event it waits behind (or NULL), $13 a release reason when
 * it is parked behind a released one (released with it, so the replay applies it next) or NULL.
 * Later events of its aggregate parked for a gap of their own are put behind it.
 */
export const QUARANTINE_SQL = `
WITH parked AS (
  INSERT INTO {{schema}}.inbox_quarantine (consumer, event_id, aggregate_type, aggregate_id, sequence,
    event_type, schema_version, headers, payload, reason, attempts, behind_event_id, released_at, release_reason)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
    CASE WHEN $13::text IS NULL THEN NULL ELSE now() END, $13)
  ON CONFLICT (consumer, event_id) DO UPDATE
  SET reason = excluded.reason, attempts = excluded.attempts, quarantined_at = now(),
      behind_event_id = excluded.behind_event_id,
      released_at = excluded.released_at, release_reason = excluded.release_reason
  RETURNING id
), cleared AS (
  DELETE FROM {{schema}}.inbox_attempts WHERE consumer = $1 AND event_id = $2
), behind AS (
  -- Later events of the aggregate quarantined for a gap (their budgets ran out about together,
  -- or this one came late): they wait behind this one now, and are released with it.
  UPDATE {{schema}}.inbox_quarantine
  SET behind_event_id = $2,
      reason = 'waiting behind quarantined event ' || ($2::uuid)::text || ' (sequence ' || ($5::bigint)::text || ')'
  WHERE consumer = $1 AND aggregate_type = $3 AND aggregate_id = $4 AND sequence > $5
    AND behind_event_id IS NULL AND released_at IS NULL AND reason LIKE '${GAP_NOT_FILLED}%'
)
SELECT id::text AS id FROM parked`;

/**
 * A quarantined message that was released is let through the schema check (and a gap) once; one
 * that was parked behind another is not: it is simply handled again, in order.
 */
export const RELEASED_SQL = `
SELECT 1 FROM {{schema}}.inbox_quarantine
WHERE consumer = $1 AND event_id = $2 AND released_at IS NOT NULL AND behind_event_id IS NULL`;

/** Released messages of a consumer, in aggregate order, to hand to the handler again. */
export const RELEASED_MESSAGES_SQL = `
SELECT id::text AS id, event_id::text AS event_id, aggregate_type, aggregate_id, sequence::text AS sequence,
       event_type, schema_version, headers, payload
FROM {{schema}}.inbox_quarantine
WHERE consumer = $1 AND released_at IS NOT NULL AND id <> ALL ($3::bigint[])
ORDER BY aggregate_type, aggregate_id, sequence
LIMIT $2`;

/**
 * A released message was handled: its quarantine row goes, and what was still parked behind it
 * unreleased (it was parked while the release ran) is released now, for the replay to apply next.
 */
export const DONE_QUARANTINE_SQL = `
WITH done AS (
  DELETE FROM {{schema}}.inbox_quarantine WHERE id = $1 AND released_at IS NOT NULL
  RETURNING consumer, event_id
)
UPDATE {{schema}}.inbox_quarantine q
SET released_at = now(), release_reason = 'behind ' || done.event_id::text || ', replayed'
FROM done
WHERE q.consumer = done.consumer AND q.behind_event_id = done.event_id AND q.released_at IS NULL`;

/**
 * Everything the inbox writes for a new event, in one round trip before the handler runs: the
 * dedup record; the aggregate's position, created or advanced under its row lock (which
 * serialises one aggregate across consumer instances), returning the sequence it held before
 * (read from the locked row, never from an older snapshot); and the failed-attempt count
 * cleared; `updated_at` (position retention, docs/schema.md) set. When the ordering policy refuses the event, or the handler fails, the transaction
 * rolls back and all of it with it. No row back: this consumer already has the event.
 */
export const CLAIM_AND_ADVANCE_SQL = claimAndAdvanceSql('processed');

/** {@link CLAIM_AND_ADVANCE_SQL} for a skip marker (`dead skip`): recorded as `skipped`. */
export const CLAIM_AND_ADVANCE_SKIPPED_SQL = claimAndAdvanceSql('skipped');

function claimAndAdvanceSql(outcome: 'processed' | 'skipped'): string {
  return `
WITH claimed AS (
  INSERT INTO {{schema}}.inbox (consumer, event_id, aggregate_type, aggregate_id, sequence, outcome)
  VALUES ($1, $2, $3, $4, $5, '${outcome}')
  ON CONFLICT (consumer, event_id) DO NOTHING
  RETURNING consumer
), cleared AS (
  DELETE FROM {{schema}}.inbox_attempts
  WHERE consumer = $1 AND event_id = $2 AND EXISTS (SELECT 1 FROM claimed)
)
INSERT INTO {{schema}}.inbox_positions AS p (consumer, aggregate_type, aggregate_id, last_sequence, previous_sequence)
SELECT $1, $3, $4, $5, 0 FROM claimed
ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE
SET previous_sequence = p.last_sequence, last_sequence = greatest(p.last_sequence, excluded.last_sequence),
    updated_at = now()
RETURNING previous_sequence::text AS last_sequence`;
}
