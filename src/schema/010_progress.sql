-- tx-outbox schema, version 10: bounded aggregate_progress for caller versions (docs/schema.md,
-- Bounded tables). {{schema}} is replaced by the validated, quoted schema name.
-- No table rewrite: a stable default only; no new index (the relay's upsert stays HOT).

-- When the relay last recorded an outcome of the aggregate (a delivery or a failed attempt), in
-- the same upsert that moves delivered_sequence. An aggregate on caller versions has no
-- aggregate_sequences row (no written_at): this is the pruner's idle test for its progress row.
-- Rows that existed before this migration count from the migration: they go one retention later.
ALTER TABLE {{schema}}.aggregate_progress ADD COLUMN IF NOT EXISTS delivered_at timestamptz NOT NULL DEFAULT now();
