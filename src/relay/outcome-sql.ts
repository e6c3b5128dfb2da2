/**
 * Outcome of a whole batch in one statement, fenced by the partition epochs
 * the relay claimed under: delivered events leave the hot table, failed ones
 * are rescheduled or marked dead with their last error. `FOR SHARE` on the
 * partition rows makes a concurrent takeover (which raises the epoch) wait for
 * this statement, or this statement see the new epoch and change nothing.
 */
export const RECORD_OUTCOME_SQL = `
WITH fence AS (
  SELECT p.partition
  FROM {{schema}}.partitions p
  JOIN unnest($2::smallint[], $3::bigint[]) AS o(partition, epoch) ON o.partition = p.partition
  WHERE p.owner = $1 AND p.epoch = o.epoch
  FOR SHARE OF p
), delivered AS (
  DELETE FROM {{schema}}.events e
  USING fence f
  WHERE e.id = ANY ($4::bigint[]) AND e.partition = f.partition
  RETURNING e.id
), failed AS (
  UPDATE {{schema}}.events e
  SET attempts = e.attempts + 1,
      status = x.status,
      next_attempt_at = now() + x.delay_ms * interval '1 millisecond',
      last_error = x.error,
      dead_at = CASE WHEN x.status = 'dead' THEN now() END
  FROM unnest($5::bigint[], $6::text[], $7::bigint[], $8::text[]) AS x(id, status, delay_ms, error), fence f
  WHERE e.id = x.id AND e.partition = f.partition
  RETURNING e.id
)
SELECT (SELECT count(*) FROM delivered)::int AS delivered, (SELECT count(*) FROM failed)::int AS failed`;
