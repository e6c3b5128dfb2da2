/**
 * The producer's backpressure read: the backlog the relays published (migration 008's one-row
 * table) and, for when it is stale or missing (no relay running), PostgreSQL's live-row count
 * of the events table — two tiny reads, never a count. `fresh`: measured within one and a half
 * of the writer's intervals, on the database clock (a relay that died is not trusted for long).
 */
export const READ_PUBLISHED_BACKLOG_SQL = `
SELECT b.pending::text AS pending,
       coalesce(b.dead, 0)::text AS dead,
       coalesce(b.measured_at >= now() - 1.5 * b.interval_ms * interval '1 millisecond', false) AS fresh,
       pg_stat_get_live_tuples('{{schema}}.events'::regclass)::text AS live
FROM (VALUES (1)) AS one (x)
LEFT JOIN {{schema}}.backlog b ON b.singleton`;
