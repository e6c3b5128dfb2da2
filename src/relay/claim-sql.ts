/**
 * Claim: the next due events of the partitions this relay holds (owner, epoch
 * and an unexpired lease checked against the database clock), in id order.
 *
 * Ordering gate, database half:
 * - the scan skips events whose aggregate's head (lowest sequence still in the
 *   table) is dead or backing off, so a blocked aggregate never fills the batch;
 * - the result keeps only events with no earlier event of their aggregate
 *   outside the batch (still running late, not yet due, or past the limit).
 * The relay needs no lock on the rows: only the partition's owner claims them.
 */
export const CLAIM_SQL = `
WITH mine AS (
  SELECT p.partition
  FROM {{schema}}.partitions p
  JOIN unnest($1::smallint[], $2::bigint[]) AS o(partition, epoch) ON o.partition = p.partition
  WHERE p.owner = $3 AND p.epoch = o.epoch AND p.lease_until > now()
), candidates AS MATERIALIZED (
  SELECT e.id, e.aggregate_type, e.aggregate_id, e.sequence
  FROM {{schema}}.events e
  WHERE e.partition = ANY (ARRAY(SELECT partition FROM mine))
    AND e.status = 'pending'
    AND e.next_attempt_at <= now()
    AND NOT EXISTS (
      SELECT 1 FROM (
        SELECT h.status, h.next_attempt_at
        FROM {{schema}}.events h
        WHERE h.aggregate_type = e.aggregate_type AND h.aggregate_id = e.aggregate_id
        ORDER BY h.sequence
        LIMIT 1
      ) head
      WHERE head.status = 'dead' OR head.next_attempt_at > now())
  ORDER BY e.id
  LIMIT $4
)
SELECT e.id::text AS id, e.event_id::text AS event_id, e.partition, e.aggregate_type, e.aggregate_id,
       e.sequence::text AS sequence, e.event_type, e.schema_version, e.topic,
       e.payload::text AS payload, e.payload_bytes, e.headers::text AS headers, e.created_at, e.attempts
FROM candidates c
JOIN {{schema}}.events e ON e.id = c.id
WHERE NOT EXISTS (
  SELECT 1 FROM {{schema}}.events p
  WHERE p.aggregate_type = c.aggregate_type AND p.aggregate_id = c.aggregate_id AND p.sequence < c.sequence
    AND p.id NOT IN (SELECT id FROM candidates))
ORDER BY e.id`;
