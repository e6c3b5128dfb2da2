import { FENCE } from './handover-sql.js';

/**
 * The delivered sequence of the aggregates `$1`/`$2` (types, ids) the stream's gate has not seen
 * this session: one primary-key lookup per aggregate, all in one statement. An aggregate without
 * a row is not returned (nothing delivered that the table remembers).
 */
export const PROGRESS_LOOKUP_SQL = `
SELECT g.aggregate_type || chr(31) || g.aggregate_id AS key, g.delivered_sequence::text AS delivered
FROM unnest($1::text[], $2::text[]) AS k(aggregate_type, aggregate_id)
JOIN {{schema}}.aggregate_progress g
  ON g.aggregate_type = k.aggregate_type AND g.aggregate_id = k.aggregate_id`;

/**
 * The progress of the caller-versioned WAL-mode events the stream delivered (`$5`…`$7`: types,
 * ids, highest sequence), fenced like every write of the CDC relay: a relay restarted (or one
 * that takes over) reads it back, so a repeat of a delivered version is not published again.
 * WAL-mode events on default sequences write nothing (they cannot repeat).
 */
export const WAL_PROGRESS_SQL = `
WITH ${FENCE}, progress AS (
  INSERT INTO {{schema}}.aggregate_progress AS g (aggregate_type, aggregate_id, delivered_sequence, delivered_at)
  SELECT y.aggregate_type, y.aggregate_id, y.delivered, now()
  FROM unnest($5::text[], $6::text[], $7::bigint[]) AS y(aggregate_type, aggregate_id, delivered)
  WHERE (SELECT ok FROM held)
  ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE
  SET delivered_sequence = greatest(g.delivered_sequence, excluded.delivered_sequence),
      delivered_at = excluded.delivered_at
)
SELECT (SELECT ok FROM held) AS ok`;
