-- tx-outbox inbox, version 4: a strict gap's budget counts observed waiting and restarts when its
-- aggregate advances, and a quarantined event holds back the rest of its aggregate visibly.
-- inbox_attempts.gap_after: for a deferral on a gap, the sequence the aggregate stood at when the
-- count started (NULL: the count is of handler failures). Another position restarts the count.
ALTER TABLE {{schema}}.inbox_attempts ADD COLUMN IF NOT EXISTS gap_after bigint;
-- inbox_attempts.waited_ms: for a deferral on a gap, the waiting observed since the count started:
-- the sum of the intervals between consecutive deferrals, each at most a minute (an outage between
-- two deliveries — consumer, broker or database down — is not waiting the stream can be blamed for).
ALTER TABLE {{schema}}.inbox_attempts ADD COLUMN IF NOT EXISTS waited_ms bigint NOT NULL DEFAULT 0;
-- Counts version 3 left of deferrals on a gap (it counted them with handler failures): marked as
-- such with a position no aggregate stands at, so either kind of count starts again from 1.
UPDATE {{schema}}.inbox_attempts SET gap_after = -1
WHERE gap_after IS NULL AND last_reason LIKE 'waiting for sequence %';
-- inbox_quarantine.behind_event_id: the quarantined event of the same aggregate this one waits
-- behind (NULL: quarantined for its own reason). Releasing that one releases these too.
ALTER TABLE {{schema}}.inbox_quarantine ADD COLUMN IF NOT EXISTS behind_event_id uuid;
-- Which events of an aggregate are quarantined: read on a strict gap (never on the hot path).
CREATE INDEX IF NOT EXISTS inbox_quarantine_aggregate
  ON {{schema}}.inbox_quarantine (consumer, aggregate_type, aggregate_id, sequence);
