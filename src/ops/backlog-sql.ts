/**
 * The backlog in one statement whose cost grows with neither the backlog nor the dead events: a
 * bounded sample at the head of the pending events ($1 rows in id order, read through the
 * partial index `events_pending` of migration 14, so dead rows ahead of them are never walked
 * past), the exact dead count from `dead_counts` (one row per partition, kept by triggers:
 * migration 14), the live-row count of the statistics system, and the small `partitions` and
 * `relays` tables. O(sample + partitions + relays): never a scan of the events table, never a
 * walk past its dead events.
 */
/**
 * The planner settings {@link READ_BACKLOG_SQL} runs under (set local to its transaction): its
 * sample must be the ordered walk of `events_pending` that stops after $1 rows. With statistics
 * that say the table is small (taken while it was), PostgreSQL would rather read every pending
 * event in a bitmap or sequential scan and sort them: cheap at 300 rows, a scan of the backlog
 * at a million. No JIT either: its compile time would dwarf the read.
 */
export const BACKLOG_PLANNER_SQL = `
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('jit', 'off', true)`;

export const READ_BACKLOG_SQL = `
WITH sample AS (
  SELECT h.partition,
         count(*)::int8 AS sampled,
         count(*) FILTER (WHERE h.status = 'pending')::int8 AS pending,
         count(*) FILTER (WHERE h.status = 'pending' AND h.attempts > 0)::int8 AS retrying,
         min(greatest(h.created_at, h.deliver_after))
           FILTER (WHERE h.status = 'pending' AND (h.deliver_after IS NULL OR h.deliver_after <= now())) AS oldest_due,
         max(h.created_at) AS newest
  FROM (
    SELECT e.partition, e.status, e.attempts, e.created_at, e.deliver_after
    FROM {{schema}}.events e
    WHERE e.status = 'pending'
    ORDER BY e.id
    LIMIT $1
  ) h
  GROUP BY h.partition
)
SELECT
  (SELECT coalesce(sum(s.sampled), 0) FROM sample s)::int8 AS sampled,
  (SELECT coalesce(sum(s.retrying), 0) FROM sample s)::int8 AS retrying,
  (SELECT coalesce(sum(c.dead), 0) FROM {{schema}}.dead_counts c)::int8 AS dead,
  pg_stat_get_live_tuples('{{schema}}.events'::regclass)::int8 AS live,
  extract(epoch FROM now() - (SELECT max(s.newest) FROM sample s))::float8 AS horizon_age,
  (SELECT coalesce(json_agg(json_build_object(
      'partition', s.partition,
      'pending', s.pending,
      'oldestDueAge', extract(epoch FROM now() - s.oldest_due)::float8
    )), '[]'::json)
   FROM sample s) AS sample,
  (SELECT coalesce(json_agg(json_build_object(
      'partition', p.partition,
      'owner', p.owner,
      'epoch', p.epoch,
      'leaseExpiresInSeconds',
        CASE WHEN p.owner IS NULL THEN NULL ELSE extract(epoch FROM p.lease_until - now())::float8 END
    ) ORDER BY p.partition), '[]'::json)
   FROM {{schema}}.partitions p) AS partitions,
  (SELECT coalesce(json_agg(json_build_object(
      'relayId', r.relay_id,
      'host', r.host,
      'pid', r.pid,
      'lastHeartbeatSecondsAgo', extract(epoch FROM now() - r.heartbeat_at)::float8,
      'live', r.heartbeat_at + r.lease_ms * interval '1 millisecond' >= now()
    ) ORDER BY r.relay_id), '[]'::json)
   FROM {{schema}}.relays r) AS relays`;

/**
 * The old full count, for `tx-outbox status --exact`: one pass over the whole events table
 * (a sequential scan: seconds at millions of rows). Same shape as the sample's aggregates.
 */
export const EXACT_BACKLOG_SQL = `
SELECT e.partition,
       count(*) FILTER (WHERE e.status = 'pending')::int8 AS pending,
       count(*) FILTER (WHERE e.status = 'pending' AND e.attempts > 0)::int8 AS retrying,
       extract(epoch FROM now() - min(greatest(e.created_at, e.deliver_after))
         FILTER (WHERE e.status = 'pending' AND (e.deliver_after IS NULL OR e.deliver_after <= now())))::float8
         AS oldest_due_age
FROM {{schema}}.events e
GROUP BY e.partition`;

/**
 * The relays' published backlog (migration 008): written every few seconds by any relay, at
 * most about twice an interval whatever the number of relays (the WHERE skips a fresh row).
 */
export const PUBLISH_BACKLOG_SQL = `
INSERT INTO {{schema}}.backlog AS b (singleton, pending, dead, interval_ms, measured_at)
VALUES (true, $1, $2, $3, now())
ON CONFLICT (singleton) DO UPDATE
SET pending = excluded.pending, dead = excluded.dead, interval_ms = excluded.interval_ms,
    measured_at = excluded.measured_at
WHERE b.measured_at < now() - excluded.interval_ms * interval '1 millisecond' / 2`;
