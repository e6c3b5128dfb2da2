/**
 * The last event of the chain of the aggregate whose sequence row is `s` has left the table (the
 * gate passes no chained event before its previous one has left: every earlier one has too).
 * Meaningful while the chain is whole up to `s.last_id_sequence`.
 */
export const CHAIN_END_GONE = 'NOT EXISTS (SELECT 1 FROM {{schema}}.events c WHERE c.id = s.last_id)';

/**
 * The delivered sequence of the aggregate of `e`, an event gated by sequence: the relay's
 * `aggregate_progress.delivered_sequence` (written for such events), the event's
 * `sequence_base`, or the sequence of the last event of the aggregate's chain once that event
 * has left the table (015_previous_id.sql: the gate passes no chained event before its previous
 * one has left, so every sequence up to it is delivered; chained deliveries write no progress).
 * The highest of the three. Shared by the claim (CLAIM_SQL), the gap bridge (BRIDGE_GAPS_SQL),
 * `dead skip` and `event <id>`.
 */
export const SEQUENCE_DELIVERED = `greatest(
         coalesce((SELECT g.delivered_sequence FROM {{schema}}.aggregate_progress g
                   WHERE g.aggregate_type = e.aggregate_type AND g.aggregate_id = e.aggregate_id), 0),
         e.sequence_base,
         coalesce((SELECT s.last_id_sequence FROM {{schema}}.aggregate_sequences s
                   WHERE s.aggregate_type = e.aggregate_type AND s.aggregate_id = e.aggregate_id
                     AND ${CHAIN_END_GONE}), 0))`;
