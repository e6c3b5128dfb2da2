import { SEQUENCE_DELIVERED } from '../core/gate-sql.js';

/**
 * `findEvent`: where one event is. The hot table has no index on event_id (every index costs
 * every producer's insert), so the first statement scans it: fine for an operator's question,
 * not for a hot path. The history and the audit trail are small or indexed.
 */

/**
 * `$1` event id → the event if it is still in the hot table, with what it may wait for: the
 * head (lowest sequence) of the earlier events of its aggregate still in the table, its
 * aggregate's progress (read by the gate only for events gated by sequence, `chained` false:
 * 015_previous_id.sql), and its partition's lease.
 */
export const FIND_HOT_EVENT_SQL = `
WITH e AS (
  SELECT * FROM {{schema}}.events WHERE event_id = $1::uuid LIMIT 1
)
SELECT e.event_id::text AS event_id, e.partition, e.aggregate_type, e.aggregate_id, e.sequence::text AS sequence,
       e.sequence_base::text AS sequence_base, e.previous_id IS NOT NULL AS chained, e.event_type, e.topic, e.status, e.created_at, e.deliver_after, e.next_attempt_at, e.attempts,
       e.last_error, e.dead_at, now() AS now,
       h.event_id::text AS head_event_id, h.sequence::text AS head_sequence, h.status AS head_status,
       h.attempts AS head_attempts, h.last_error AS head_last_error, h.next_attempt_at AS head_next_attempt_at,
       h.dead_at AS head_dead_at,
       (SELECT count(*) FROM {{schema}}.events x
        WHERE x.aggregate_type = e.aggregate_type AND x.aggregate_id = e.aggregate_id
          AND x.sequence < e.sequence)::int AS earlier,
       (SELECT count(*) FROM {{schema}}.events x
        WHERE x.aggregate_type = e.aggregate_type AND x.aggregate_id = e.aggregate_id
          AND x.sequence > e.sequence)::int AS later,
       CASE WHEN e.previous_id IS NULL THEN ${SEQUENCE_DELIVERED}::text END AS gate_delivered,
       CASE WHEN isfinite(g.blocked_until) THEN g.blocked_until END AS blocked_until,
       coalesce(g.blocked_until = 'infinity', false) AS blocked_forever,
       p.owner, p.lease_until > now() AS lease_live
FROM e
LEFT JOIN LATERAL (
  SELECT * FROM {{schema}}.events h
  WHERE h.aggregate_type = e.aggregate_type AND h.aggregate_id = e.aggregate_id AND h.sequence < e.sequence
  ORDER BY h.sequence LIMIT 1
) h ON true
LEFT JOIN {{schema}}.aggregate_progress g
  ON g.aggregate_type = e.aggregate_type AND g.aggregate_id = e.aggregate_id
LEFT JOIN {{schema}}.partitions p ON p.partition = e.partition`;

/** `$1` event id → its deliveries in the history, latest first (a takeover may publish twice). */
export const FIND_DELIVERIES_SQL = `
SELECT event_id::text AS event_id, partition, aggregate_type, aggregate_id, sequence::text AS sequence,
       event_type, topic, created_at, published_at, attempts, relay_id, publisher
FROM {{schema}}.deliveries
WHERE event_id = $1::uuid
ORDER BY published_at DESC`;

/** How far back the history reaches: its oldest daily partition, and whether it holds any row. */
export const HISTORY_REACH_SQL = `
SELECT to_regclass('{{schema}}.deliveries') IS NOT NULL AS present,
       (SELECT min(to_date(substr(c.relname, 13), 'YYYYMMDD'))::text
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = to_regclass('{{schema}}.deliveries') AND c.relname ~ '^deliveries_p[0-9]{8}$') AS oldest_day`;

/** Whether the history holds any row (run only when the table exists). */
export const HISTORY_ANY_SQL = `SELECT EXISTS (SELECT 1 FROM {{schema}}.deliveries) AS any`;

/** `$1` event id → the operator actions that named it (replay, skip), oldest first. */
export const FIND_AUDIT_SQL = `
SELECT at, actor, action, reason, cardinality(event_ids) AS event_count
FROM {{schema}}.audit
WHERE event_ids @> ARRAY[$1::uuid]
ORDER BY at, id`;
