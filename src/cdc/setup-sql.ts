/**
 * The CDC relay's setup statements: the publication, the slot, the safety checks and the slot's
 * status. Catalog reads only, apart from the CREATE/DROP statements and the takeover; none needs
 * a superuser (the slot statements need the REPLICATION attribute).
 */

import { defaultSlotSql } from '../schema/cdc-names.js';

/**
 * The two settings the checks read (`max_slot_wal_keep_size` as PostgreSQL prints it: '-1', '10GB'),
 * and whether the role may start a walsender (REPLICATION or superuser).
 */
export const SETTINGS_SQL = `
SELECT current_setting('wal_level') AS wal_level,
       current_setting('max_slot_wal_keep_size') AS max_slot_wal_keep_size,
       current_user::text AS role,
       (SELECT r.rolreplication OR r.rolsuper FROM pg_roles r WHERE r.rolname = current_user) AS replication`;

/** One advisory lock per slot: concurrent ensures create each object once and never race each other. */
export const SETUP_LOCK_SQL = `SELECT pg_advisory_lock(hashtextextended('tx-outbox:cdc:' || $1::text, 0))`;
export const SETUP_UNLOCK_SQL = `SELECT pg_advisory_unlock(hashtextextended('tx-outbox:cdc:' || $1::text, 0))`;

/** The publication, and whether it publishes inserts into `<schema>.events`. */
export const PUBLICATION_SQL = `
SELECT p.pubinsert,
       EXISTS (SELECT 1 FROM pg_publication_tables t
               WHERE t.pubname = p.pubname AND t.schemaname = $2 AND t.tablename = 'events') AS has_events
FROM pg_publication p
WHERE p.pubname = $1`;

/** `{{publication}}` is the validated, quoted publication name. */
export const CREATE_PUBLICATION_SQL = `CREATE PUBLICATION {{publication}} FOR TABLE {{schema}}.events WITH (publish = 'insert')`;
export const DROP_PUBLICATION_SQL = `DROP PUBLICATION IF EXISTS {{publication}}`;

/** The default slot of schema $1 in this database (defaultSlotSql). */
export const DEFAULT_SLOT_SQL = `SELECT ${defaultSlotSql('$1::text')} AS slot`;

/** A permanent pgoutput slot; waits for the transactions running at the time to end (a consistent start). */
export const CREATE_SLOT_SQL = `SELECT lsn::text AS lsn FROM pg_create_logical_replication_slot($1, 'pgoutput')`;

/**
 * Drops slot $1 only if it belongs to this database, in one statement (a slot of the same name in
 * another database is never dropped, whatever happens in between): one row when it was dropped.
 */
export const DROP_SLOT_SQL = `
SELECT pg_drop_replication_slot(slot_name)
FROM pg_catalog.pg_replication_slots
WHERE slot_name = $1 AND database = current_database()`;

/** Where slot $1 is, if anywhere: its database (null for a physical slot) and type. */
export const SLOT_DATABASE_SQL = `
SELECT database::text AS database, slot_type, current_database()::text AS here
FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`;

/**
 * The slot as the checks and `cdc status` see it; one row even when the slot or the cdc_state row
 * is missing. Lags in bytes against the server's current WAL position; lag in seconds as the
 * streaming relay last measured it (cdc_state).
 */
export const SLOT_STATUS_SQL = `
SELECT s.slot_name IS NOT NULL AS exists,
       s.plugin, s.slot_type, s.database, s.database = current_database() AS same_database,
       coalesce(s.active, false) AS active, s.active_pid, s.wal_status,
       s.confirmed_flush_lsn::text AS confirmed_lsn,
       (pg_current_wal_lsn() - s.confirmed_flush_lsn)::text AS lag_bytes,
       (pg_current_wal_lsn() - s.restart_lsn)::text AS retained_bytes,
       c.lag_seconds, c.measured_at, c.relay_id
FROM (SELECT $1::text AS name) n
LEFT JOIN pg_replication_slots s ON s.slot_name = n.name
LEFT JOIN {{schema}}.cdc_state c ON c.slot_name = n.name`;

/**
 * Ends the walsender streaming the slot of this database, whoever it is; returns its pid, or no
 * row when the slot is idle (or not this database's: another database's walsender is never ended).
 */
export const TERMINATE_SLOT_HOLDER_SQL = `
SELECT active_pid AS pid, pg_terminate_backend(active_pid) AS terminated
FROM pg_catalog.pg_replication_slots
WHERE slot_name = $1 AND database = current_database() AND active_pid IS NOT NULL`;

export const SLOT_ACTIVE_SQL = `
SELECT active, active_pid FROM pg_catalog.pg_replication_slots
WHERE slot_name = $1 AND database = current_database()`;
