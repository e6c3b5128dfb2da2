/**
 * Delivery history maintenance: the statements that call the partition functions of
 * 005_history.sql. Each runs alone in a short transaction with a lock_timeout
 * ({@link HISTORY_LOCK_TIMEOUT_SQL}), so DDL waiting for a lock gives up instead of queueing
 * ahead of (and so blocking) the relay's outcome statements.
 */

/** `$1` days ahead, `$2` retention in days → rows (action 'create' | 'drop' | 'purge', day). */
export const HISTORY_PLAN_SQL = `SELECT action, to_char(day, 'YYYY-MM-DD') AS day FROM {{schema}}.history_plan($1::int, $2::int)`;

/** `$1` day → rows moved from DEFAULT, -1 when the partition exists already. */
export const HISTORY_ADD_PARTITION_SQL = `SELECT {{schema}}.history_add_partition($1::date)::int AS moved`;

/** `$1` day, `$2` retention in days → whether it was dropped. */
export const HISTORY_DROP_PARTITION_SQL = `SELECT {{schema}}.history_drop_partition($1::date, $2::int) AS dropped`;

/** `$1` retention in days → DEFAULT rows deleted. */
export const HISTORY_PURGE_DEFAULT_SQL = `SELECT {{schema}}.history_purge_default($1::int)::int AS purged`;

/** The partitions of the history (DEFAULT included), for the `history_partitions` gauge and the CLI. */
export const HISTORY_PARTITIONS_SQL = `
SELECT count(*)::int AS partitions
FROM pg_inherits i
WHERE i.inhparent = to_regclass('{{schema}}.deliveries')`;

/** Set inside each maintenance transaction, before the call. */
export const HISTORY_LOCK_TIMEOUT_SQL = `SET LOCAL lock_timeout = '500ms'`;
