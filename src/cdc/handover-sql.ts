import { CLAIM_SQL } from '../relay/claim/claim-sql.js';
import { BRIDGE_GAPS_SQL } from '../relay/claim/sequence-faults-sql.js';
import { PARTITION_FENCE } from '../relay/fence-sql.js';

/**
 * The fence of every write of the CDC relay: the partition rows it holds under the epochs it
 * acquired them with, locked FOR SHARE (a takeover raises the epochs and waits for this
 * statement, or this statement sees the new epochs and writes nothing). The relay holds every
 * partition, so `$4` (the count it holds) must all match.
 */
export const FENCE = `
${PARTITION_FENCE}, held AS (
  SELECT count(*) = $4 AS ok FROM fence
)`;

/**
 * Handover of streamed events to the polling path, in one statement run with
 * synchronous_commit = on (the stream confirms past these events once it commits, so the rows
 * must survive a server crash): the WAL-mode events' rows (`$5`…`$21`: failed ones with their
 * attempt, status and error, later ones pending; `$27`: written after the stream session began,
 * kept even at or below the aggregate's progress), and each aggregate's progress where it first
 * leaves the stream (`$22`…`$25`: delivered up to the event before, blocked until its retry;
 * a null block leaves it as it is, -1 blocks for good: a dead head). Returns whether the fence
 * held and the transaction's id (the stream sees this insert again and must skip it); a
 * transactional message with the handover prefix (`$26`) whose content is the transaction's own
 * id marks it as the relay's own for a relay that does not know its id (a restart streams it
 * again; see `isOwnMarker`). The partition is `partition_of`'s, never the message's (`$6` is not
 * written: anyone can emit a message, and a row in a partition no lease covers is never claimed).
 */
export const HANDOVER_SQL = `
WITH ${FENCE}, inserted AS (
  INSERT INTO {{schema}}.events (event_id, partition, aggregate_type, aggregate_id, sequence, sequence_base,
                                 event_type, schema_version, topic, payload, payload_bytes, headers, created_at,
                                 next_attempt_at, attempts, last_error, status, dead_at)
  SELECT x.event_id, {{schema}}.partition_of(x.aggregate_type, x.aggregate_id), x.aggregate_type, x.aggregate_id, x.sequence, x.sequence_base,
         x.event_type, x.schema_version, x.topic,
         CASE WHEN x.json THEN convert_from(x.payload, 'UTF8')::jsonb END,
         CASE WHEN NOT x.json THEN x.payload END,
         x.headers::jsonb, x.created_at,
         now() + x.delay_ms * interval '1 millisecond', x.attempts, x.error, x.status,
         CASE WHEN x.status = 'dead' THEN now() END
  FROM unnest($5::uuid[], $6::smallint[], $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::text[],
              $12::integer[], $13::text[], $14::bytea[], $15::boolean[], $16::text[], $17::timestamptz[],
              $18::bigint[], $19::integer[], $20::text[], $21::text[], $27::boolean[])
       AS x(event_id, partition, aggregate_type, aggregate_id, sequence, sequence_base, event_type,
            schema_version, topic, payload, json, headers, created_at, delay_ms, attempts, error, status, fresh)
  WHERE (SELECT ok FROM held)
    -- Streamed again after a reconnect: handed over already, or delivered by P since. An event
    -- written after the stream session began is no replay: kept even at or below the progress
    -- (a repeated caller version; P marks it dead).
    AND NOT EXISTS (SELECT 1 FROM {{schema}}.events e WHERE e.event_id = x.event_id)
    AND (x.fresh OR NOT EXISTS (SELECT 1 FROM {{schema}}.aggregate_progress g
                    WHERE g.aggregate_type = x.aggregate_type AND g.aggregate_id = x.aggregate_id
                      AND g.delivered_sequence >= x.sequence))
  RETURNING 1
), progress AS (
  INSERT INTO {{schema}}.aggregate_progress AS g (aggregate_type, aggregate_id, delivered_sequence, blocked_until, delivered_at)
  SELECT y.aggregate_type, y.aggregate_id, y.delivered,
         CASE WHEN y.block_ms < 0 THEN 'infinity'::timestamptz
              WHEN y.block_ms IS NOT NULL THEN now() + y.block_ms * interval '1 millisecond' END,
         now()
  FROM unnest($22::text[], $23::text[], $24::bigint[], $25::bigint[]) AS y(aggregate_type, aggregate_id, delivered, block_ms)
  WHERE (SELECT ok FROM held)
  ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE
  SET delivered_sequence = greatest(g.delivered_sequence, excluded.delivered_sequence),
      blocked_until = CASE WHEN excluded.blocked_until IS NULL THEN g.blocked_until ELSE excluded.blocked_until END,
      delivered_at = excluded.delivered_at
)
SELECT (SELECT ok FROM held) AS ok, pg_current_xact_id()::text AS xid,
       pg_logical_emit_message(true, $26::text, pg_current_xact_id()::text)::text AS marker`;

/**
 * Whether the transactions `$1` (32-bit ids, as the stream gives them) are visible to a snapshot
 * taken now. The stream may deliver a commit before it is visible: PostgreSQL writes (and the
 * walsender sends) the commit record before the transaction leaves the running set, so an outcome
 * statement run at once might not see the rows it deletes. Ids are widened to xid8 against the
 * snapshot's xmax (a transaction streamed now is less than 2^31 transactions old).
 */
export const VISIBLE_SQL = `
WITH s AS (
  SELECT pg_current_snapshot() AS snap, pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax
)
SELECT coalesce(bool_and(pg_visible_in_snapshot(
         (CASE WHEN x <= (s.xmax & 4294967295) THEN (s.xmax & ~4294967295::bigint) | x
               ELSE ((s.xmax & ~4294967295::bigint) - 4294967296) | x END)::text::xid8, s.snap)), true) AS visible
FROM s, unnest($1::bigint[]) AS x`;

/**
 * Once the stream has settled everything committed before the polled set was read (`$5`: those
 * aggregates), the table holds every event of theirs not delivered: WAL-mode events the stream
 * delivered wrote no progress, so each one's progress is raised to just below its lowest row —
 * else P would wait out the gap grace before publishing across what WAL mode delivered.
 */
export const CAUGHT_UP_SQL = `
WITH ${FENCE}, lowest AS (
  SELECT aggregate_type, aggregate_id, min(sequence) - 1 AS delivered
  FROM {{schema}}.events
  WHERE (aggregate_type || chr(31) || aggregate_id) = ANY ($5::text[])
  GROUP BY aggregate_type, aggregate_id
)
INSERT INTO {{schema}}.aggregate_progress AS g (aggregate_type, aggregate_id, delivered_sequence, delivered_at)
SELECT l.aggregate_type, l.aggregate_id, l.delivered, now() FROM lowest l
WHERE (SELECT ok FROM held)
ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE
SET delivered_sequence = excluded.delivered_sequence
WHERE g.delivered_sequence < excluded.delivered_sequence`;

/**
 * The start read (at start and after each reconnect), one row per aggregate with rows in the
 * table: its lowest and highest sequence there, its delivered sequence, and whether it is the
 * polling path's at once (`polled`): a row failed before (attempts, dead), scheduled for later,
 * or its aggregate blocked (a retry's backoff, a dead head). The others are "unknown" until the
 * stream shows whether their rows stream again (see `Handover.resolve`).
 */
export const START_SET_SQL = `
SELECT e.aggregate_type || chr(31) || e.aggregate_id AS key,
       e.min_sequence::text AS min_sequence, e.max_sequence::text AS max_sequence,
       coalesce(g.delivered_sequence, 0)::text AS delivered,
       (e.odd OR g.blocked_until IS NOT NULL) AS polled
FROM (
  SELECT aggregate_type, aggregate_id, min(sequence) AS min_sequence, max(sequence) AS max_sequence,
         bool_or(attempts > 0 OR status <> 'pending' OR deliver_after > now()) AS odd
  FROM {{schema}}.events
  GROUP BY aggregate_type, aggregate_id
) e
LEFT JOIN {{schema}}.aggregate_progress g
  ON g.aggregate_type = e.aggregate_type AND g.aggregate_id = e.aggregate_id`;

/** Of the polled aggregates `$1`, those with a row left in the table. */
export const STILL_POLLED_SQL = `
SELECT DISTINCT aggregate_type || chr(31) || aggregate_id AS key
FROM {{schema}}.events
WHERE (aggregate_type || chr(31) || aggregate_id) = ANY ($1::text[])`;

/** The scan filter {@link POLLED_CLAIM_SQL} adds after the claim's hold-back filter. */
const HELD_BACK_FILTER =
  'AND (e.aggregate_type || chr(31) || e.aggregate_id) NOT IN (SELECT unnest($6::text[]))';
const ID_ORDER = '\nORDER BY e.id\n';
/** The range of BRIDGE_GAPS_SQL's earlier events: rows below the highest head's id. */
const EARLIER_BELOW_HEADS = 'WHERE o.id < (SELECT max(h.id) FROM head h)\n    AND ';

function polledVariant(): string {
  if (!CLAIM_SQL.includes(HELD_BACK_FILTER) || !CLAIM_SQL.includes(ID_ORDER))
    throw new Error('claim statement changed shape');
  // A jsonb object lookup is a binary search over its sorted keys: O(log n) per row scanned,
  // where a join with unnest() would be planned as a nested loop over every key.
  return CLAIM_SQL.replace(
    HELD_BACK_FILTER,
    `${HELD_BACK_FILTER}
    AND e.sequence <= coalesce(($9::jsonb ->> (e.aggregate_type || chr(31) || e.aggregate_id))::bigint, 0)`,
  ).replace(ID_ORDER, '\nORDER BY e.sequence, e.id\n');
}

/**
 * The polling relay's claim ({@link CLAIM_SQL}) restricted to the polled aggregates: `$9` a JSON
 * object of aggregate key → the sequence the stream has handed over so far (see
 * `Handover.claimableUpTo`); rows of other aggregates, or above it, are not candidates.
 *
 * In sequence order, not id order: a polled aggregate's rows are not in the table in sequence
 * order. A WAL-mode event handed over gets its row (and id) when the stream hands it over, after
 * the table-mode rows of later sequences of its aggregate that their producers inserted
 * meanwhile (WAL-mode and table-mode producers of one aggregate; a handover long after the
 * commit: an aggregate refused as unavailable, a restart streaming again). In id order a claim
 * of a batch could hold those later rows and not the earlier one, and hold the aggregate at a
 * "gap" forever; in sequence order a claimed row comes with every earlier claimable row of its
 * aggregate.
 */
export const POLLED_CLAIM_SQL = polledVariant();

function polledBridge(): string {
  if (!BRIDGE_GAPS_SQL.includes(EARLIER_BELOW_HEADS)) throw new Error('gap bridge statement changed shape');
  return BRIDGE_GAPS_SQL.replace(EARLIER_BELOW_HEADS, 'WHERE ');
}

/**
 * The gap bridge ({@link BRIDGE_GAPS_SQL}) of the hand-over source: an earlier event of a held
 * head's aggregate is looked for among all the table's rows, not only those below the heads'
 * ids, for the reason given at {@link POLLED_CLAIM_SQL} (a handed-over WAL-mode event's row has
 * a higher id than its aggregate's later table-mode rows). Bridging past such an event published
 * its successors first and then marked it dead as a repeat: lost. One scan of the table, at most
 * once a second and only for heads held past the gap grace.
 */
export const POLLED_BRIDGE_GAPS_SQL = polledBridge();
