import { SEQUENCE_DELIVERED } from '../../core/gate-sql.js';

/**
 * Claim: the next due events of the partitions this relay holds (owner, epoch and an unexpired
 * lease checked against the database clock), in id order.
 *
 * Ordering gate, database half (docs/schema.md, The ordering gate). An event written by `enqueue`
 * names its aggregate's previous event (`previous_id`, 015_previous_id.sql); the claim probes the
 * primary key for it: `waits` while that row is still in the table. A row whose previous event
 * is dead or waits for a retry or its `deliver_after` cannot pass and is not returned, nor one
 * behind a blocked head (`aggregate_progress.blocked_until`, written for failures only, read only
 * for rows whose previous event is still in the table). Delivering them writes nothing per event.
 *
 * Rows gated by sequence (`previous_id` NULL: written before migration 15, caller versions,
 * WAL-mode events handed over, the first after a writer that does not keep the chain) come with
 * their aggregate's delivered sequence ({@link SEQUENCE_DELIVERED}; an aggregate created after
 * the pruner ran starts at base+1: docs/schema.md, Bounded tables), and the scan skips those whose
 * aggregate's head is blocked (dead, or backing off until `blocked_until`). Only such rows
 * probe `aggregate_progress` and `aggregate_sequences` (a CASE evaluates its subqueries for them
 * alone).
 *
 * Which rows pass is decided by the relay from these rows (src/relay/claim/claim-gate.ts).
 * The scan starts at `$7` (the relay's scan floor, src/relay/polling/scan-floor.ts; 0 for a full
 * scan). Work per claim is bounded by the batch size, not by the backlog. No row locks: only the
 * partition's owner claims its rows and writes their outcome. Payloads come with every row
 * except those right behind an event in flight (`withheld`: a chained row whose previous event is
 * in flight, `$5`; a row gated by sequence of an aggregate with an event in flight, `$8`): such a
 * row cannot pass, and a pipelined claim over few aggregates returns many of them.
 */
export const CLAIM_SQL = `
WITH mine AS (
  SELECT p.partition
  FROM {{schema}}.partitions p
  JOIN unnest($1::smallint[], $2::bigint[]) AS o(partition, epoch) ON o.partition = p.partition
  WHERE p.owner = $3 AND p.epoch = o.epoch AND p.lease_until > now()
)
SELECT e.id::text AS id, e.event_id::text AS event_id, e.partition, e.aggregate_type, e.aggregate_id,
       e.sequence::text AS sequence, e.sequence_base::text AS sequence_base, e.event_type, e.schema_version, e.topic,
       CASE WHEN NOT x.withheld THEN e.payload::text END AS payload,
       CASE WHEN NOT x.withheld THEN e.payload_bytes END AS payload_bytes,
       e.headers::text AS headers, e.created_at, e.deliver_after, e.attempts,
       e.previous_id::text AS previous_id, b.status IS NOT NULL AS waits,
       CASE WHEN e.previous_id IS NULL THEN ${SEQUENCE_DELIVERED}::text END AS delivered,
       x.withheld
FROM {{schema}}.events e
-- The previous event, while it is in the table: a probe per row (OFFSET 0 keeps the subquery a
-- parameterised probe; as a plain join the planner may hash the whole table and sort the backlog).
LEFT JOIN LATERAL (
  SELECT b.status, b.next_attempt_at FROM {{schema}}.events b WHERE b.id = e.previous_id OFFSET 0
) b ON true
-- A row behind an event in flight cannot pass: its payload is not sent. A chained row is when its
-- previous event is one of the ids in flight ($5); a row gated by sequence, when its aggregate
-- has an event in flight ($8: no key is built for the others). OFFSET 0 keeps it a subquery,
-- evaluated once a row: pulled up, its expression is copied into each of the three columns that
-- read it, each with a hash table of its own of the ids in flight (measured: 0.3–0.9 ms of the
-- 5–8 ms of backend CPU of a 1,000-row claim with 2,000 ids in flight).
CROSS JOIN LATERAL (
  SELECT CASE WHEN e.previous_id IS NULL
              THEN (e.aggregate_type || chr(31) || e.aggregate_id) IN (SELECT unnest($8::text[]))
              ELSE e.previous_id IN (SELECT unnest($5::bigint[])) END AS withheld
  OFFSET 0
) x
-- No partition held under a live lease: a one-time filter skips the scan altogether.
WHERE EXISTS (SELECT 1 FROM mine)
  AND e.partition = ANY (ARRAY(SELECT partition FROM mine))
  -- Where the scan starts (src/relay/scan-floor.ts): an index condition, not a filter.
  AND e.id >= $7::bigint
  AND e.status = 'pending'
  AND e.next_attempt_at <= now()
  AND e.id NOT IN (SELECT unnest($5::bigint[]))
  AND (e.aggregate_type || chr(31) || e.aggregate_id) NOT IN (SELECT unnest($6::text[]))
  -- The previous event is dead or not due: this one cannot pass.
  AND (b.status IS NULL OR (b.status = 'pending' AND b.next_attempt_at <= now()))
  -- Its aggregate's head is not blocked (a failed head's retry, a dead head): asked only of rows
  -- gated by sequence and of chained rows whose previous event is still in the table, so that
  -- the events behind a blocked head do not fill the claim.
  AND ((e.previous_id IS NOT NULL AND b.status IS NULL) OR NOT EXISTS (
    SELECT 1 FROM {{schema}}.aggregate_progress g
    WHERE g.aggregate_type = e.aggregate_type AND g.aggregate_id = e.aggregate_id AND g.blocked_until > now()))
ORDER BY e.id
LIMIT $4`;
