import { FENCE } from './handover-sql.js';

const COLUMNS = `event_id, partition, aggregate_type, aggregate_id, sequence, event_type,
                                     topic, created_at, published_at, attempts, relay_id, publisher`;

/** The batch's events, `$5`…`$12`, and with `more` further arrays and their column names. */
function rows(more = '', names = ''): string {
  return `unnest($5::uuid[], $6::smallint[], $7::text[], $8::text[], $9::bigint[], $10::text[],
              $11::text[], $12::timestamptz[]${more})
       AS x(event_id, partition, aggregate_type, aggregate_id, sequence, event_type, topic, created_at${names})`;
}

/**
 * The delivery history of the WAL-mode events a streamed batch delivered (history on), in one
 * statement: one `deliveries` row each (`$5`…`$12`: ids, partitions, types, aggregate ids,
 * sequences, event types, topics, created_at; `$13` the publisher's name), published now on the
 * database clock, one attempt (a WAL-mode event that fails in the stream is handed over to the
 * table, and its row then written by the outcome statement). Fenced like every write of the CDC
 * relay: a relay whose partitions were taken over writes nothing (the new owner publishes again).
 * Table-mode events get theirs from the outcome statement (src/relay/outcome-sql.ts).
 */
export const WAL_HISTORY_SQL = `
WITH ${FENCE}, history AS (
  INSERT INTO {{schema}}.deliveries (${COLUMNS})
  SELECT x.event_id, x.partition, x.aggregate_type, x.aggregate_id, x.sequence, x.event_type,
         x.topic, x.created_at, now(), 1, $1, $13
  FROM ${rows()}
  WHERE (SELECT ok FROM held)
)
SELECT (SELECT ok FROM held) AS ok`;

/**
 * {@link WAL_HISTORY_SQL} keeping the payloads too (`history.payloads`): `$14` the payloads as
 * enqueued, `$15` whether each is JSON (then `payload`, as jsonb) or bytes (`payload_bytes`).
 */
export const WAL_HISTORY_PAYLOADS_SQL = `
WITH ${FENCE}, history AS (
  INSERT INTO {{schema}}.deliveries (${COLUMNS},
                                     payload, payload_bytes)
  SELECT x.event_id, x.partition, x.aggregate_type, x.aggregate_id, x.sequence, x.event_type,
         x.topic, x.created_at, now(), 1, $1, $13,
         CASE WHEN x.json THEN convert_from(x.payload, 'UTF8')::jsonb END,
         CASE WHEN NOT x.json THEN x.payload END
  FROM ${rows(', $14::bytea[], $15::boolean[]', ', payload, json')}
  WHERE (SELECT ok FROM held)
)
SELECT (SELECT ok FROM held) AS ok`;
