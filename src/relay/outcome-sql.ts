import { PARTITION_FENCE } from './fence-sql.js';

/**
 * Outcome of a whole batch in one statement, fenced by the partition epochs
 * the relay claimed under: delivered events leave the hot table, failed ones
 * are rescheduled or marked dead with their last error. `aggregate_progress` is written only
 * where the gate reads it (docs/schema.md, The ordering gate): the delivered sequence of events
 * gated by sequence (`previous_id` NULL), and until when a failed event blocks its aggregate
 * (its retry; dead: for good) — with when (the pruner's idle test for caller versions,
 * docs/schema.md). A delivered event that names its previous one writes nothing but its DELETE:
 * its absence is what lets the next event of its aggregate pass. `FOR SHARE` on
 * the partition rows makes a concurrent takeover (which raises the epoch) wait for this statement,
 * or this statement see the new epoch and change nothing. `held` counts the batch's partitions the
 * fence found still held: with all of them held, an event that changed no row was not in the table
 * any more (delivered before: a republish after a crash or a takeover), not fenced off.
 *
 * The fenced partitions are one array (an InitPlan, evaluated once), each row's partition a filter
 * on the primary-key probe: a join with the fence would be planned as a nested loop that probes
 * every id once per partition held (16 × the index work; `test/integration/outcome-plan.test.ts`).
 */
export const RECORD_OUTCOME_SQL = `
WITH ${PARTITION_FENCE}, delivered AS (
  DELETE FROM {{schema}}.events e
  WHERE e.id = ANY ($4::bigint[]) AND e.partition = ANY (ARRAY(SELECT partition FROM fence))
  RETURNING e.aggregate_type, e.aggregate_id, e.sequence, e.previous_id
), failed AS (
  UPDATE {{schema}}.events e
  SET attempts = e.attempts + 1,
      status = x.status,
      next_attempt_at = now() + x.delay_ms * interval '1 millisecond',
      last_error = x.error,
      dead_at = CASE WHEN x.status = 'dead' THEN now() END
  FROM unnest($5::bigint[], $6::text[], $7::bigint[], $8::text[]) AS x(id, status, delay_ms, error)
  WHERE e.id = x.id AND e.partition = ANY (ARRAY(SELECT partition FROM fence))
  RETURNING e.aggregate_type, e.aggregate_id,
            CASE WHEN e.status = 'dead' THEN 'infinity'::timestamptz ELSE e.next_attempt_at END AS blocked_until
), touched AS (
  SELECT coalesce(d.aggregate_type, b.aggregate_type) AS aggregate_type,
         coalesce(d.aggregate_id, b.aggregate_id) AS aggregate_id,
         coalesce(d.delivered_sequence, 0) AS delivered_sequence,
         b.blocked_until
  FROM (SELECT aggregate_type, aggregate_id, max(sequence) AS delivered_sequence
        FROM delivered WHERE previous_id IS NULL GROUP BY aggregate_type, aggregate_id) d
  FULL JOIN failed b ON b.aggregate_type = d.aggregate_type AND b.aggregate_id = d.aggregate_id
), progress AS (
  INSERT INTO {{schema}}.aggregate_progress AS g (aggregate_type, aggregate_id, delivered_sequence, blocked_until, delivered_at)
  SELECT aggregate_type, aggregate_id, delivered_sequence, blocked_until, now() FROM touched
  ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE
  SET delivered_sequence = greatest(g.delivered_sequence, excluded.delivered_sequence),
      blocked_until = excluded.blocked_until,
      delivered_at = excluded.delivered_at
)
SELECT (SELECT count(*) FROM delivered)::int AS delivered, (SELECT count(*) FROM failed)::int AS failed,
       (SELECT count(*) FROM fence)::int AS held`;

/**
 * {@link RECORD_OUTCOME_SQL} for a batch whose every event was delivered and names its previous
 * one (`previous_id` set, never changed after the insert): such a delivery writes nothing but its
 * DELETE, so the statement is that DELETE under the same fence, with the same counts, and none of
 * the failure and progress CTEs (measured: about a tenth of the outcome's PostgreSQL CPU for
 * 1,000 events). Parameters `$1`…`$4` of the full statement. Not with the history (its rows
 * come from the full statement's RETURNING).
 */
export const RECORD_CHAINED_DELIVERED_SQL = `
WITH ${PARTITION_FENCE}, delivered AS (
  DELETE FROM {{schema}}.events e
  WHERE e.id = ANY ($4::bigint[]) AND e.partition = ANY (ARRAY(SELECT partition FROM fence))
  RETURNING 1
)
SELECT (SELECT count(*) FROM delivered)::int AS delivered, 0 AS failed,
       (SELECT count(*) FROM fence)::int AS held`;

/** The `delivered` CTE's RETURNING in {@link RECORD_OUTCOME_SQL}, widened for the history. */
const DELIVERED_RETURNING = 'RETURNING e.aggregate_type, e.aggregate_id, e.sequence, e.previous_id\n)';

const HISTORY_RETURNING = `RETURNING e.aggregate_type, e.aggregate_id, e.sequence, e.previous_id, e.event_id, e.partition, e.event_type,
            e.topic, e.created_at, e.attempts + 1 AS attempts`;

const HISTORY_CTE = `
), history AS (
  INSERT INTO {{schema}}.deliveries (event_id, partition, aggregate_type, aggregate_id, sequence, event_type,
                                     topic, created_at, published_at, attempts, relay_id, publisher)
  SELECT event_id, partition, aggregate_type, aggregate_id, sequence, event_type,
         topic, created_at, now(), attempts, $1, $9
  FROM delivered
)`;

const HISTORY_PAYLOADS_CTE = `
), history AS (
  INSERT INTO {{schema}}.deliveries (event_id, partition, aggregate_type, aggregate_id, sequence, event_type,
                                     topic, created_at, published_at, attempts, relay_id, publisher,
                                     payload, payload_bytes)
  SELECT event_id, partition, aggregate_type, aggregate_id, sequence, event_type,
         topic, created_at, now(), attempts, $1, $9, payload, payload_bytes
  FROM delivered
)`;

function withHistory(returning: string, cte: string): string {
  if (!RECORD_OUTCOME_SQL.includes(DELIVERED_RETURNING)) throw new Error('outcome statement changed shape');
  return RECORD_OUTCOME_SQL.replace(DELIVERED_RETURNING, `${returning}${cte}`);
}

/**
 * {@link RECORD_OUTCOME_SQL} that also keeps the delivery history: the rows its DELETE returns
 * go to `deliveries` in the same statement (published now, on the database clock; `$9` the
 * publisher's name). Chosen once when the relay is created; without history the relay runs the
 * statement above unchanged.
 */
export const RECORD_OUTCOME_HISTORY_SQL = withHistory(HISTORY_RETURNING, HISTORY_CTE);

/** {@link RECORD_OUTCOME_HISTORY_SQL} keeping the payloads too (`history.payloads`). */
export const RECORD_OUTCOME_HISTORY_PAYLOADS_SQL = withHistory(
  `${HISTORY_RETURNING}, e.payload, e.payload_bytes`,
  HISTORY_PAYLOADS_CTE,
);

/** The outcome statement's family name and text for a relay with or without history. */
export function outcomeStatement(history: { readonly payloads: boolean } | undefined): [string, string] {
  if (!history) return ['outcome', RECORD_OUTCOME_SQL];
  return history.payloads
    ? ['outcome_history_payloads', RECORD_OUTCOME_HISTORY_PAYLOADS_SQL]
    : ['outcome_history', RECORD_OUTCOME_HISTORY_SQL];
}
