-- tx-outbox schema, version 15: an ordering gate with no per-event write (docs/schema.md, The
-- ordering gate). {{schema}} is replaced by the validated, quoted schema name.
--
-- Each event written by `enqueue` (table mode, default sequences) carries the row id of its
-- aggregate's previous event, handed out with the sequence under the sequence row's lock. The
-- relay's claim probes the primary key for it: while that row is in the table the event waits,
-- once it is gone (delivered, or skipped unpublished) the event may go. Delivering an event then
-- writes nothing but its DELETE: `aggregate_progress` is written only for failures, dead events
-- and the events gated by sequence (previous_id NULL, below).
--
-- No table rewrite: columns without defaults only; no new index.

-- The row id of the aggregate's previous event; 0: none (its first event, or every earlier one
-- was delivered before its sequence row was pruned). NULL: not known, gated by sequence and
-- aggregate_progress as before: events written before this migration (or by a producer from
-- before it), caller versions, WAL-mode events handed over to the table, and the event after a
-- writer that does not keep the chain (a WAL-mode event, a producer from before version 15).
ALTER TABLE {{schema}}.events ADD COLUMN IF NOT EXISTS previous_id bigint;

-- The chain's end, kept by the producer in the same UPDATE that hands out the sequence:
-- last_id, the row id of the aggregate's last event (drawn from the events' id sequence under
-- the row lock, so id order is sequence order within an aggregate); last_id_sequence, its
-- sequence: a writer that moves last_sequence without keeping the chain leaves it behind, and
-- the next event's previous_id is then NULL (not known), never a wrong id; prior_id, what
-- last_id was before the last bump (an UPDATE returns new values only): the writer's
-- previous_id. The row is updated in place as before (no indexed column changes: HOT).
ALTER TABLE {{schema}}.aggregate_sequences ADD COLUMN IF NOT EXISTS last_id bigint;
ALTER TABLE {{schema}}.aggregate_sequences ADD COLUMN IF NOT EXISTS last_id_sequence bigint;
ALTER TABLE {{schema}}.aggregate_sequences ADD COLUMN IF NOT EXISTS prior_id bigint;
-- A batch's row ids of the aggregate, drawn under the row's lock (the last one is last_id): the
-- statement reads them back from its own UPDATE. Kept until the next batch overwrites it.
ALTER TABLE {{schema}}.aggregate_sequences ADD COLUMN IF NOT EXISTS batch_ids bigint[];
