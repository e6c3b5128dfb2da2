/**
 * The statements that make caller-version faults safe (docs/guarantees.md, Caller versions):
 * a repeated sequence goes dead, a gap with nothing before it is bridged. Both are fenced by
 * the partition epochs, as every statement of the relay's that changes an event.
 */
import { SEQUENCE_DELIVERED } from '../../core/gate-sql.js';
import { PARTITION_FENCE } from '../fence-sql.js';

/**
 * Repeats: each event (`$4` ids, `$5` their last_error) whose sequence is at or below its
 * aggregate's delivered sequence becomes dead, attempts untouched (it was never published).
 * Unlike a failed publish it does not block its aggregate (`aggregate_progress` is left
 * alone): the events after it are published in order. `$1` owner, `$2`/`$3` partitions and
 * their epochs as claimed.
 */
export const REPEAT_DEAD_SQL = `
WITH ${PARTITION_FENCE}
UPDATE {{schema}}.events e
SET status = 'dead', dead_at = now(), last_error = x.error
FROM unnest($4::bigint[], $5::text[]) AS x(id, error)
WHERE e.id = x.id AND e.partition = ANY (ARRAY(SELECT partition FROM fence)) AND e.status = 'pending'
RETURNING e.id::text AS id`;

/**
 * Gap bridge, one statement for every due head of the partitions `$2` (epochs `$3`, owner `$1`):
 * each head (`$4` ids, events held at a gap for the grace) still pending and still above
 * delivered+1 gets `sequence_base = sequence - 1` — the gate then passes it, and `strict`
 * consumers accept the jump — unless an earlier event of its aggregate (above delivered, any
 * status: due later, backing off, in flight, dead) is still in the table: that one holds it back
 * legitimately.
 *
 * Events have no index on the aggregate, and must keep it so (every index costs every
 * producer's insert). But an earlier event of an aggregate has a lower id than its later one:
 * under the caller-version contract one aggregate's events are written in sequence order, one
 * transaction after the other, and ids are drawn in that order. So `earlier` is a primary-key
 * range scan of the rows below the highest head (`id < max(head.id)`), the heads' aggregates
 * picked out by a filter, materialised once whatever the number of heads: its cost is the rows
 * ahead of the heads, not the table (under the relay's `enable_seqscan = off` the range is
 * always an index scan). A row of the aggregate in that range but above a head's id (a contract
 * breach) still holds the head back. An earlier version written after its head (ids out of
 * sequence order, which the contract excludes) is not seen: once the head is published that one
 * is a repeat, and goes dead visibly. The relay runs this at most once a second, off the claim
 * path, and only for heads held past the grace. Returns the bridged events.
 */
export const BRIDGE_GAPS_SQL = `
WITH ${PARTITION_FENCE}, head AS MATERIALIZED (
  SELECT e.id, e.aggregate_type, e.aggregate_id, e.sequence, ${SEQUENCE_DELIVERED} AS delivered
  FROM {{schema}}.events e
  WHERE e.id = ANY ($4::bigint[]) AND e.partition = ANY (ARRAY(SELECT partition FROM fence))
    AND e.status = 'pending'
  -- A head another session holds (an operator's open transaction) waits for the next probe: the
  -- probe never waits on a row lock while it holds the partitions' rows (lease renewals update them).
  FOR UPDATE OF e SKIP LOCKED
), earlier AS MATERIALIZED (
  -- No head left: max() is null and the range is empty.
  SELECT o.aggregate_type, o.aggregate_id, o.sequence
  FROM {{schema}}.events o
  WHERE o.id < (SELECT max(h.id) FROM head h)
    AND (o.aggregate_type || chr(31) || o.aggregate_id)
        = ANY (ARRAY(SELECT h.aggregate_type || chr(31) || h.aggregate_id FROM head h))
)
UPDATE {{schema}}.events e
SET sequence_base = e.sequence - 1
FROM head h
WHERE e.id = h.id
  AND h.sequence > h.delivered + 1
  AND NOT EXISTS (
    SELECT 1 FROM earlier o
    WHERE o.aggregate_type = h.aggregate_type AND o.aggregate_id = h.aggregate_id
      AND o.sequence > h.delivered AND o.sequence < h.sequence
  )
RETURNING e.id::text AS id, e.event_id::text AS event_id, e.aggregate_type, e.aggregate_id,
          e.sequence::text AS sequence, h.delivered::text AS delivered`;
