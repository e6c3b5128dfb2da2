-- tx-outbox, version 7: dead events an operator resolves without publishing them (`dead skip`).
-- audit.events: the rows an action removed or replaced, whole (every column, payload included), as
-- a JSON array of to_jsonb(events row); NULL for actions that keep the rows (replay).
ALTER TABLE {{schema}}.audit ADD COLUMN IF NOT EXISTS events jsonb;
-- `dead show <id>` reads the history of one event: rare writes, so an index costs nothing.
CREATE INDEX IF NOT EXISTS audit_event_ids ON {{schema}}.audit USING gin (event_ids);
-- inbox.outcome 'skipped': the consumer received the skip marker of an event an operator skipped
-- (its handler did not run; the aggregate's position moved past it). Every existing row satisfies
-- the new, wider check: NOT VALID spares the scan of a large inbox under this migration's lock
-- (new rows are checked all the same).
ALTER TABLE {{schema}}.inbox DROP CONSTRAINT IF EXISTS inbox_outcome_check;
ALTER TABLE {{schema}}.inbox ADD CONSTRAINT inbox_outcome_check
  CHECK (outcome IN ('processed', 'stale', 'skipped')) NOT VALID;
