/**
 * Claim: the next due events of the partitions this relay holds (owner, epoch
 * and an unexpired lease checked against the database clock), in id order.
 *
 * Ordering gate, database half. Default sequences are gap-free and an aggregate's
 * events leave the table from the front, so the events of one aggregate still
 * in the table are exactly sequences delivered+1, delivered+2, … where
 * delivered is `aggregate_progress.delivered_sequence` (kept by the relay
 * itself) or, when higher, the events' `sequence_base`: an aggregate created
 * after the pruner ran starts at base+1 (docs/schema.md, Bounded tables).
 * - The scan skips aggregates whose head is blocked (dead, or backing off until
 *   `blocked_until`), so a blocked aggregate never fills the batch.
 * - An event passes (`gate = 'pass'`) only when it and every earlier event of its
 *   aggregate are in the batch: its rank among the batch's events of that aggregate
 *   must equal its distance from the last delivered sequence, and no sequence up to
 *   it may come twice (its rank by distinct sequence equals its rank by row).
 * - Caller versions (`enqueue({ sequence })`) are checked by the producer within one
 *   call only. An event at or below `delivered` is a repeat (`'repeat'`): it can
 *   never be published in order, so it takes no rank among its aggregate's other
 *   events (it holds nothing back) and the relay marks it dead (REPEAT_DEAD_SQL in
 *   sequence-faults-sql.ts). An aggregate whose lowest claimable event is above
 *   delivered+1 is held at a gap (`'gap'`): after a grace the relay probes for an
 *   earlier event and, finding none, bridges it (BRIDGE_GAPS_SQL). Other rows held
 *   back are `'hold'`.
 * Work per claim is bounded by the batch size (one primary-key probe of
 * aggregate_progress per scanned row), not by the backlog. No row locks: only the
 * partition's owner claims its rows and writes its aggregates' progress.
 */
export const CLAIM_SQL = `
WITH mine AS (
  SELECT p.partition
  FROM {{schema}}.partitions p
  JOIN unnest($1::smallint[], $2::bigint[]) AS o(partition, epoch) ON o.partition = p.partition
  WHERE p.owner = $3 AND p.epoch = o.epoch AND p.lease_until > now()
), candidates AS MATERIALIZED (
  SELECT e.id, e.event_id, e.partition, e.aggregate_type, e.aggregate_id, e.sequence, e.event_type,
         e.schema_version, e.topic, e.payload, e.payload_bytes, e.headers, e.created_at, e.deliver_after, e.attempts,
         greatest(coalesce(g.delivered_sequence, 0), e.sequence_base) AS delivered, e.sequence_base
  FROM {{schema}}.events e
  LEFT JOIN {{schema}}.aggregate_progress g
    ON g.aggregate_type = e.aggregate_type AND g.aggregate_id = e.aggregate_id
  -- No partition held under a live lease: a one-time filter skips the scan altogether.
  WHERE EXISTS (SELECT 1 FROM mine)
    AND e.partition = ANY (ARRAY(SELECT partition FROM mine))
    AND e.status = 'pending'
    AND e.next_attempt_at <= now()
    AND e.id NOT IN (SELECT unnest($5::bigint[]))
    AND (e.aggregate_type || chr(31) || e.aggregate_id) NOT IN (SELECT unnest($6::text[]))
    AND (g.blocked_until IS NULL OR g.blocked_until <= now())
  ORDER BY e.id
  LIMIT $4
), ranked AS (
  -- Repeats form a window partition of their own: they take no rank among the others.
  SELECT c.*, c.sequence <= c.delivered AS repeat,
         row_number() OVER (PARTITION BY c.aggregate_type, c.aggregate_id, c.sequence <= c.delivered
                            ORDER BY c.sequence, c.id) AS rank,
         dense_rank() OVER (PARTITION BY c.aggregate_type, c.aggregate_id, c.sequence <= c.delivered
                            ORDER BY c.sequence) AS distinct_rank
  FROM candidates c
), gated AS (
  SELECT r.*,
         CASE WHEN r.repeat THEN 'repeat'
              WHEN r.sequence = r.delivered + r.rank AND r.rank = r.distinct_rank THEN 'pass'
              WHEN r.rank = 1 THEN 'gap'
              ELSE 'hold' END AS gate
  FROM ranked r
)
SELECT g.id::text AS id, g.event_id::text AS event_id, g.partition, g.aggregate_type, g.aggregate_id,
       g.sequence::text AS sequence, g.sequence_base::text AS sequence_base, g.event_type, g.schema_version, g.topic,
       CASE WHEN g.gate = 'pass' THEN g.payload::text END AS payload,
       CASE WHEN g.gate = 'pass' THEN g.payload_bytes END AS payload_bytes,
       g.headers::text AS headers, g.created_at, g.deliver_after, g.attempts,
       g.delivered::text AS delivered, g.gate, g.gate = 'pass' AS passed
FROM gated g
ORDER BY g.id`;
