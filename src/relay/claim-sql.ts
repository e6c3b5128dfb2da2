/**
 * Claim: the next due events of the partitions this relay holds (owner, epoch
 * and an unexpired lease checked against the database clock), in id order.
 *
 * Ordering gate, database half. The events of one aggregate still in the table
 * form a contiguous run of sequences from its head (sequences are gap-free and
 * delivered events leave from the front). So:
 * - the scan probes each row's aggregate head (one index probe) and skips rows
 *   whose head is dead or backing off, so a blocked aggregate never fills the batch;
 * - an event is kept only when it and every earlier event of its aggregate are
 *   in the batch: its rank among the batch's events of that aggregate must match
 *   its distance from the head. Work per claim is bounded by the batch size,
 *   not by the backlog.
 * The relay needs no row locks: only the partition's owner claims its rows.
 */
export const CLAIM_SQL = `
WITH mine AS (
  SELECT p.partition
  FROM {{schema}}.partitions p
  JOIN unnest($1::smallint[], $2::bigint[]) AS o(partition, epoch) ON o.partition = p.partition
  WHERE p.owner = $3 AND p.epoch = o.epoch AND p.lease_until > now()
), candidates AS MATERIALIZED (
  SELECT e.id, e.aggregate_type, e.aggregate_id, e.sequence, head.sequence AS head_sequence
  FROM {{schema}}.events e
  CROSS JOIN LATERAL (
    SELECT h.sequence, h.status, h.next_attempt_at
    FROM {{schema}}.events h
    WHERE h.aggregate_type = e.aggregate_type AND h.aggregate_id = e.aggregate_id
    ORDER BY h.sequence
    LIMIT 1
  ) head
  WHERE e.partition = ANY (ARRAY(SELECT partition FROM mine))
    AND e.status = 'pending'
    AND e.next_attempt_at <= now()
    AND head.status = 'pending'
    AND head.next_attempt_at <= now()
  ORDER BY e.id
  LIMIT $4
), gated AS (
  SELECT c.id, c.sequence, c.head_sequence,
         row_number() OVER (PARTITION BY c.aggregate_type, c.aggregate_id ORDER BY c.sequence) AS rank
  FROM candidates c
)
SELECT e.id::text AS id, e.event_id::text AS event_id, e.partition, e.aggregate_type, e.aggregate_id,
       e.sequence::text AS sequence, e.event_type, e.schema_version, e.topic,
       e.payload::text AS payload, e.payload_bytes, e.headers::text AS headers, e.created_at, e.attempts
FROM gated g
JOIN {{schema}}.events e ON e.id = g.id
WHERE g.sequence = g.head_sequence + g.rank - 1
ORDER BY e.id`;
