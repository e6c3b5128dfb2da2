import { FENCE } from './handover-sql.js';

/**
 * For the aggregates `$1`/`$2` (types, ids) the stream's gate has not seen this session: the
 * delivered sequence (0 without a progress row) and whether the aggregate has a sequence row —
 * the table-mode tell: caller versions write none, default sequences always one. Two primary-key
 * probes per aggregate, all in one statement.
 */
export const PROGRESS_LOOKUP_SQL = `
SELECT k.aggregate_type || chr(31) || k.aggregate_id AS key,
       coalesce(g.delivered_sequence, 0)::text AS delivered,
       EXISTS (SELECT 1 FROM {{schema}}.aggregate_sequences s
               WHERE s.aggregate_type = k.aggregate_type AND s.aggregate_id = k.aggregate_id) AS counted
FROM unnest($1::text[], $2::text[]) AS k(aggregate_type, aggregate_id)
LEFT JOIN {{schema}}.aggregate_progress g
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
