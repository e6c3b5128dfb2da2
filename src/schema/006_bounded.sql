-- tx-outbox, version 6: tables bounded by configuration, not by history (docs/schema.md, Bounded tables).
-- No table rewrite: constant or stable defaults only; no new index on the producer's path.

-- The sequence floor: at least the last sequence of every aggregate whose aggregate_sequences row
-- was pruned. It only rises (setval by the one pruner of the schema, before its delete is visible;
-- never nextval). A sequence, not a table: producers read its current value whatever their
-- snapshot, after waiting on a row the pruner held, so a re-created aggregate never reuses a
-- sequence a consumer has seen.
CREATE SEQUENCE IF NOT EXISTS {{schema}}.sequence_floor AS bigint MINVALUE 0 START 0;

-- Where an aggregate's sequences start: its first event is sequence_base + 1. 0 for an aggregate
-- created before the first prune; the floor for one created (or re-created) after it.
ALTER TABLE {{schema}}.aggregate_sequences ADD COLUMN IF NOT EXISTS sequence_base bigint NOT NULL DEFAULT 0;
-- When the aggregate was last written: the pruner's idle test. Set by the producer's own UPDATE
-- (not indexed, so the update stays HOT).
ALTER TABLE {{schema}}.aggregate_sequences ADD COLUMN IF NOT EXISTS written_at timestamptz NOT NULL DEFAULT now();
-- Each event carries its aggregate's base: the relay's ordering gate starts at
-- greatest(delivered, base), consumers learn it from the `sequencebase` attribute.
ALTER TABLE {{schema}}.events ADD COLUMN IF NOT EXISTS sequence_base bigint NOT NULL DEFAULT 0;

-- When a consumer's position for an aggregate last moved: position retention (R_c).
ALTER TABLE {{schema}}.inbox_positions ADD COLUMN IF NOT EXISTS updated_at timestamptz NOT NULL DEFAULT now();
