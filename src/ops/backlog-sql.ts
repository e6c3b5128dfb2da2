/**
 * The backlog in one statement whose cost does not grow with the backlog: a bounded sample at
 * the primary-key head ($1 undelivered rows that are not dead, in id order; dead rows before them
 * are walked past, as many as the dead count reads anyway), the exact dead count
 * through the partial index `events_dead` (migration 008), the live-row count of the
 * statistics system, and the two small tables (partitions, relays). O(sample + dead +
 * partitions + relays); never a scan of the events table.
 */
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
    WHERE e.status <> 'dead'
    ORDER BY e.id
    LIMIT $1
  ) h
  GROUP BY h.partition
)
SELECT
  (SELECT coalesce(sum(s.sampled), 0) FROM sample s)::int8 AS sampled,
  (SELECT coalesce(sum(s.retrying), 0) FROM sample s)::int8 AS retrying,
  (SELECT count(*) FROM {{schema}}.events d WHERE d.status = 'dead')::int8 AS dead,
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
