/**
 * The statements of `dead list | show | replay | skip`; `{{schema}}` is the validated, quoted
 * schema name. Filters are parameters, NULL meaning "any": `$f+0` event ids, `$f+1` aggregate
 * type, `$f+2` aggregate id, `$f+3` event type, `$f+4` dead since.
 */
import { SEQUENCE_DELIVERED } from '../core/gate-sql.js';
import { SKIPPED_EVENT_TYPE } from '../skip-marker.js';

/** The dead events a filter selects; `$1`–`$5` the filter (see the module comment). */
const DEAD_MATCHING = `
  e.status = 'dead'
  AND ($1::uuid[] IS NULL OR e.event_id = ANY ($1::uuid[]))
  AND ($2::text IS NULL OR e.aggregate_type = $2::text)
  AND ($3::text IS NULL OR e.aggregate_id = $3::text)
  AND ($4::text IS NULL OR e.event_type = $4::text)
  AND ($5::timestamptz IS NULL OR e.dead_at >= $5::timestamptz)`;

/** `$1`–`$5` the filter, `$6` the limit. */
export const LIST_DEAD_SQL = `
SELECT e.event_id::text AS event_id, e.aggregate_type, e.aggregate_id, e.sequence::text AS sequence, e.event_type,
       e.topic, e.attempts, e.last_error, e.created_at, e.dead_at
FROM {{schema}}.events e
WHERE ${DEAD_MATCHING}
ORDER BY e.dead_at, e.id
LIMIT $6`;

/** `$1`–`$5` the filter. */
export const COUNT_DEAD_SQL = `
SELECT count(*)::int AS n FROM {{schema}}.events e WHERE ${DEAD_MATCHING}`;

/** `$1`–`$5` the filter, `$6` actor, `$7` reason. */
export const REPLAY_DEAD_SQL = `
WITH replayed AS (
  UPDATE {{schema}}.events e
  SET status = 'pending', attempts = 0, next_attempt_at = now(), dead_at = NULL
  WHERE ${DEAD_MATCHING}
  RETURNING e.event_id, e.aggregate_type, e.aggregate_id
), unblocked AS (
  UPDATE {{schema}}.aggregate_progress p
  SET blocked_until = NULL
  FROM (SELECT DISTINCT aggregate_type, aggregate_id FROM replayed) r
  WHERE p.aggregate_type = r.aggregate_type AND p.aggregate_id = r.aggregate_id
), audited AS (
  INSERT INTO {{schema}}.audit (actor, action, event_ids, reason)
  SELECT $6, 'replay', array_agg(event_id), $7 FROM replayed HAVING count(*) > 0
)
SELECT event_id::text AS event_id FROM replayed`;

/**
 * The rows `$1` event ids name, locked for the skip: what they are, to refuse or report.
 * `repeat`: an event gated by sequence (015_previous_id.sql) at or below what its aggregate
 * delivered (the relay's `sequence_repeat`), so a skip marker carrying it would be a repeat too.
 * An event that names its previous one is never a repeat.
 */
export const LOCK_FOR_SKIP_SQL = `
SELECT id, event_id, status, event_type, sequence, delivered::text AS delivered,
       previous_id IS NULL AND sequence::bigint <= delivered AS repeat
FROM (
  SELECT e.id::text AS id, e.event_id::text AS event_id, e.status, e.event_type, e.sequence::text AS sequence,
         e.previous_id, ${SEQUENCE_DELIVERED} AS delivered
  FROM {{schema}}.events e
  WHERE e.event_id = ANY ($1::uuid[])
  FOR UPDATE OF e
) x`;

/**
 * For a skip without a marker: the events (`$1` ids) that still have an earlier event of their
 * aggregate in the table, other than those skipped with them. Removing such a row would leave a
 * hole the relay's ordering gate never passes.
 */
export const NOT_AT_HEAD_SQL = `
SELECT s.event_id::text AS event_id, s.sequence::text AS sequence, min(b.sequence)::text AS before
FROM {{schema}}.events s
JOIN {{schema}}.events b
  ON b.aggregate_type = s.aggregate_type AND b.aggregate_id = s.aggregate_id AND b.sequence < s.sequence
WHERE s.event_id = ANY ($1::uuid[]) AND b.event_id <> ALL ($1::uuid[])
GROUP BY s.event_id, s.sequence`;

/**
 * `dead skip`: each dead event (`$1` row ids, locked by {@link LOCK_FOR_SKIP_SQL}) is replaced in place by its skip marker (same row, event
 * id, aggregate, sequence and topic; no headers), pending and due now; its aggregate is unblocked;
 * the original rows go whole to the audit trail. `$2` actor, `$3` reason.
 */
export const SKIP_DEAD_SQL = `
WITH original AS (
  SELECT e.* FROM {{schema}}.events e WHERE e.id = ANY ($1::bigint[]) AND e.status = 'dead'
), marked AS (
  UPDATE {{schema}}.events e
  SET event_type = '${SKIPPED_EVENT_TYPE}', schema_version = 1,
      payload = jsonb_build_object('skippedType', o.event_type, 'skippedSchemaVersion', o.schema_version,
                                   'reason', $3::text, 'actor', $2::text, 'at', now()),
      payload_bytes = NULL, headers = '{}'::jsonb, status = 'pending', attempts = 0,
      next_attempt_at = now(), deliver_after = NULL, last_error = NULL, dead_at = NULL
  FROM original o
  WHERE e.id = o.id
  RETURNING e.event_id, e.aggregate_type, e.aggregate_id
), unblocked AS (
  UPDATE {{schema}}.aggregate_progress p
  SET blocked_until = NULL
  FROM (SELECT DISTINCT aggregate_type, aggregate_id FROM marked) r
  WHERE p.aggregate_type = r.aggregate_type AND p.aggregate_id = r.aggregate_id
), audited AS (
  INSERT INTO {{schema}}.audit (actor, action, event_ids, reason, events)
  SELECT $2, 'skip', array_agg(o.event_id ORDER BY o.id), $3, jsonb_agg(to_jsonb(o) ORDER BY o.id)
  FROM original o HAVING count(*) > 0
)
SELECT event_id::text AS event_id FROM marked`;

/**
 * `dead skip --no-publish`: each dead event (`$1` row ids, each at its aggregate's head) leaves the
 * table, its aggregate's delivered sequence moves past it and the aggregate is unblocked; the
 * original rows go whole to the audit trail. `$2` actor, `$3` reason.
 */
export const SKIP_DEAD_UNPUBLISHED_SQL = `
WITH original AS (
  SELECT e.* FROM {{schema}}.events e WHERE e.id = ANY ($1::bigint[]) AND e.status = 'dead'
), removed AS (
  DELETE FROM {{schema}}.events e
  USING original o
  WHERE e.id = o.id
  RETURNING e.event_id, e.aggregate_type, e.aggregate_id, e.sequence
), advanced AS (
  INSERT INTO {{schema}}.aggregate_progress AS g (aggregate_type, aggregate_id, delivered_sequence, blocked_until)
  SELECT aggregate_type, aggregate_id, max(sequence), NULL FROM removed GROUP BY aggregate_type, aggregate_id
  ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE
  SET delivered_sequence = greatest(g.delivered_sequence, excluded.delivered_sequence), blocked_until = NULL
), audited AS (
  INSERT INTO {{schema}}.audit (actor, action, event_ids, reason, events)
  SELECT $2, 'skip-unpublished', array_agg(o.event_id ORDER BY o.id), $3, jsonb_agg(to_jsonb(o) ORDER BY o.id)
  FROM original o HAVING count(*) > 0
)
SELECT event_id::text AS event_id FROM removed`;

/** `dead show`: one event's row, whatever its status (`$1` event id). */
export const SHOW_EVENT_SQL = `
SELECT e.id::text AS id, e.event_id::text AS event_id, e.partition, e.aggregate_type, e.aggregate_id,
       e.sequence::text AS sequence, e.event_type, e.schema_version, e.topic, e.status, e.attempts, e.last_error,
       e.created_at, e.deliver_after, e.next_attempt_at, e.dead_at, e.headers,
       e.payload::text AS payload, e.payload_bytes
FROM {{schema}}.events e
WHERE e.event_id = $1::uuid`;

/** `dead show`: the operator actions on one event (`$1` event id), oldest first, with its original row if kept. */
export const EVENT_AUDIT_SQL = `
SELECT a.at, a.actor, a.action, a.reason, cardinality(a.event_ids) AS event_count,
       (SELECT o FROM jsonb_array_elements(a.events) AS o WHERE o->>'event_id' = ($1::uuid)::text LIMIT 1) AS original
FROM {{schema}}.audit a
WHERE a.event_ids @> ARRAY[$1::uuid]
ORDER BY a.at, a.id`;
