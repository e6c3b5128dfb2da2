/**
 * Claim: the next due events of the partitions this relay holds (owner, epoch
 * and an unexpired lease checked against the database clock), in id order.
 *
 * Ordering gate, database half: each row comes with its aggregate's delivered sequence,
 * `aggregate_progress.delivered_sequence` (kept by the relay itself) or, when higher, the
 * event's `sequence_base` (an aggregate created after the pruner ran starts at base+1:
 * docs/schema.md, Bounded tables). The scan skips aggregates whose head is blocked (dead, or
 * backing off until `blocked_until`), so a blocked aggregate never fills the batch. Which rows
 * pass is decided by the relay from these rows (src/relay/claim-gate.ts): ranking a batch by
 * aggregate in SQL (two window functions and their sort) cost PostgreSQL more per event than
 * the scan itself, the relay does it in a fraction of that.
 *
 * The scan starts at `$7` (the relay's scan floor, src/relay/scan-floor.ts; 0 for a full scan).
 * Work per claim is bounded by the batch size (one primary-key probe of aggregate_progress per
 * scanned row), not by the backlog. No row locks: only the partition's owner claims its rows and
 * writes its aggregates' progress. Payloads come with every row except those of the aggregates
 * with an event in flight (`$8`, `withheld`): such a row cannot pass (its aggregate's delivered
 * sequence has not moved yet), and a pipelined claim over few aggregates returns many of them.
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
       greatest(coalesce(g.delivered_sequence, 0), e.sequence_base)::text AS delivered, x.withheld
FROM {{schema}}.events e
LEFT JOIN {{schema}}.aggregate_progress g
  ON g.aggregate_type = e.aggregate_type AND g.aggregate_id = e.aggregate_id
-- An aggregate with an event in flight ($8) cannot pass: its payloads are not sent.
CROSS JOIN LATERAL (
  SELECT (e.aggregate_type || chr(31) || e.aggregate_id) IN (SELECT unnest($8::text[])) AS withheld
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
  AND (g.blocked_until IS NULL OR g.blocked_until <= now())
ORDER BY e.id
LIMIT $4`;
