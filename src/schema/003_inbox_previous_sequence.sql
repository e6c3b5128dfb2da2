-- tx-outbox inbox, version 3: the position row remembers the sequence it held before the last
-- claim, so one statement can claim the event, advance the position under its row lock and
-- still tell the ordering policy what was applied before (instead of a second UPDATE after
-- the handler). No table rewrite: a constant default.
ALTER TABLE {{schema}}.inbox_positions ADD COLUMN IF NOT EXISTS previous_sequence bigint NOT NULL DEFAULT 0;
