/**
 * The CDC relay's PostgreSQL objects: the names, the publication and slot (`ensureCdcSlot`), the
 * checks a relay makes before it streams (`checkCdc`), the slot's status and lag
 * (`cdcSlotStatus`), and the way out (`dropCdcSlot`). Nothing here drops anything unless asked.
 * Replication slots are cluster-wide: every one of these matches the slot by name AND database,
 * and refuses a slot of the same name in another database (TXO_CDC_SLOT_MISMATCH, naming it)
 * instead of reporting, streaming, taking over or dropping it.
 */

import type { Pool, PoolClient } from 'pg';
import { OutboxError } from '../errors.js';
import { type Logger, silentLogger } from '../logger.js';
import { CDC_WAL_LEVEL, type CdcNameOptions, type CdcNames, checkedName } from '../schema/cdc-names.js';
import { Checkout } from '../schema/checkout.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { sleep } from '../sleep.js';
import { resolveCdcNames } from './names.js';
import {
  CREATE_PUBLICATION_SQL,
  CREATE_SLOT_SQL,
  DROP_PUBLICATION_SQL,
  DROP_SLOT_SQL,
  PUBLICATION_SQL,
  SETTINGS_SQL,
  SETUP_LOCK_SQL,
  SETUP_UNLOCK_SQL,
  SLOT_ACTIVE_SQL,
  SLOT_DATABASE_SQL,
  SLOT_STATUS_SQL,
  TERMINATE_SLOT_HOLDER_SQL,
} from './setup-sql.js';

export {
  CDC_WAL_LEVEL,
  type CdcNameChoice,
  type CdcNameOptions,
  type CdcNames,
  cdcNames,
} from '../schema/cdc-names.js';

export const CDC_SLOT_LOST = 'TXO_CDC_SLOT_LOST';
export const CDC_NO_REPLICATION = 'TXO_CDC_NO_REPLICATION';
export const CDC_SLOT_ACTIVE = 'TXO_CDC_SLOT_ACTIVE';
/**
 * The slot or the publication exists but is not one tx-outbox can stream (plugin, type, table), or
 * the slot belongs to another database.
 */
export const CDC_SLOT_MISMATCH = 'TXO_CDC_SLOT_MISMATCH';

export { resolveCdcNames } from './names.js';

type Queryable = Pool | PoolClient;

function publicationSql(sql: string, names: CdcNames): string {
  return withSchema(sql, quoteSchema(names.schema)).replaceAll('{{publication}}', `"${names.publication}"`);
}

const DUPLICATE_OBJECT = '42710';
const UNIQUE_VIOLATION = '23505';
const OBJECT_IN_USE = '55006';
const UNDEFINED_OBJECT = '42704';

function pgCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

export interface EnsureCdcSlotResult {
  readonly slot: string;
  readonly publication: string;
  /** Whether this call created the slot (false: it existed). */
  readonly created: boolean;
}

/**
 * Creates the publication (inserts into `<schema>.events`) and then the permanent pgoutput slot,
 * each only if missing. Concurrent calls are safe (an advisory lock per slot, and a creation that
 * loses a race anyway counts as "exists"). Never drops or alters anything: an existing object that
 * does not fit is an OutboxError saying what to do.
 */
export async function ensureCdcSlot(pool: Pool, options: CdcNameOptions = {}): Promise<EnsureCdcSlotResult> {
  const names = await resolveCdcNames(pool, options);
  const lease = await Checkout.of(pool);
  const { client } = lease;
  let failure: unknown;
  try {
    await client.query(SETUP_LOCK_SQL, [names.slot]);
    try {
      await ensurePublication(client, names);
      const created = await ensureSlot(client, names);
      return { slot: names.slot, publication: names.publication, created };
    } finally {
      await client.query(SETUP_UNLOCK_SQL, [names.slot]);
    }
  } catch (error) {
    failure = error;
    throw error;
  } finally {
    // A connection that may still hold the session lock must not go back to the pool.
    lease.release(failure);
  }
}

async function ensurePublication(client: PoolClient, names: CdcNames): Promise<void> {
  const found = await client.query<{ pubinsert: boolean; has_events: boolean }>(PUBLICATION_SQL, [
    names.publication,
    names.schema,
  ]);
  const row = found.rows[0];
  if (row === undefined) {
    try {
      await client.query(publicationSql(CREATE_PUBLICATION_SQL, names));
      return;
    } catch (error) {
      // Created by someone not taking our lock (an operator, another version): check it as found.
      if (pgCode(error) !== DUPLICATE_OBJECT && pgCode(error) !== UNIQUE_VIOLATION) throw error;
      return ensurePublication(client, names);
    }
  }
  if (!row.has_events || !row.pubinsert) {
    throw new OutboxError(
      `publication "${names.publication}" exists but does not publish inserts into "${names.schema}".events: ` +
        `fix it (ALTER PUBLICATION "${names.publication}" ADD TABLE "${names.schema}".events; publish = 'insert') ` +
        'or name another one with --publication',
      { code: CDC_SLOT_MISMATCH },
    );
  }
}

async function ensureSlot(client: PoolClient, names: CdcNames): Promise<boolean> {
  const status = await readSlot(client, names);
  if (status.exists) {
    const mismatch = slotMismatch(names, status);
    if (mismatch !== undefined) throw mismatch;
    return false;
  }
  try {
    await client.query(CREATE_SLOT_SQL, [names.slot]);
    return true;
  } catch (error) {
    if (pgCode(error) !== DUPLICATE_OBJECT) throw error;
    // Created meanwhile by someone our lock does not hold off (advisory locks are per database:
    // another database's relay among them): it counts as "exists" only if it is ours.
    const mismatch = await foreignSlot(client, names);
    if (mismatch !== undefined) throw mismatch;
    return false;
  }
}

/** The slot row as read by SLOT_STATUS_SQL (text columns where PostgreSQL's values outgrow a double). */
export interface SlotRow {
  readonly exists: boolean;
  readonly plugin: string | null;
  readonly slot_type: string | null;
  readonly database: string | null;
  readonly same_database: boolean | null;
  readonly active: boolean;
  readonly active_pid: number | null;
  readonly wal_status: string | null;
  readonly confirmed_lsn: string | null;
  readonly lag_bytes: string | null;
  readonly retained_bytes: string | null;
  readonly lag_seconds: number | null;
  readonly measured_at: Date | null;
  readonly relay_id: string | null;
}

async function readSlot(client: Queryable, names: CdcNames): Promise<SlotRow> {
  const { rows } = await client.query<SlotRow>(withSchema(SLOT_STATUS_SQL, quoteSchema(names.schema)), [
    names.slot,
  ]);
  return rows[0]!;
}

function slotMismatch(names: CdcNames, row: SlotRow): OutboxError | undefined {
  if (row.slot_type === 'logical' && row.same_database === false) {
    return otherDatabaseError(names.slot, row.database);
  }
  const problem =
    row.slot_type !== 'logical'
      ? `is a ${row.slot_type ?? 'unknown'} slot`
      : row.plugin !== 'pgoutput'
        ? `uses the plugin "${row.plugin ?? '?'}"`
        : undefined;
  if (problem === undefined) return undefined;
  return new OutboxError(
    `replication slot "${names.slot}" ${problem}, not a logical pgoutput slot of this database: ` +
      'name another slot with --slot (it is created for you), or drop that one if it is not in use',
    { code: CDC_SLOT_MISMATCH },
  );
}

/**
 * A slot of the name in another database: never ours to stream, report, take over or drop (slots
 * are cluster-wide, and that database's relay or producers may depend on it).
 */
function otherDatabaseError(slot: string, database: string | null): OutboxError {
  return new OutboxError(
    `replication slot "${slot}" belongs to the database "${database ?? '?'}", not to the one this ` +
      "connection is to: tx-outbox never uses, reports or drops another database's slot. Name a slot of " +
      'this database with --slot (the slot option; it is created for you), or connect to ' +
      `"${database ?? '?'}" to manage that one`,
    { code: CDC_SLOT_MISMATCH },
  );
}

/** The refusal when slot `names.slot` exists but not in this database (or is physical); else undefined. */
async function foreignSlot(db: Queryable, names: CdcNames): Promise<OutboxError | undefined> {
  const { rows } = await db.query<{ database: string | null; slot_type: string; here: string }>(
    SLOT_DATABASE_SQL,
    [names.slot],
  );
  const row = rows[0];
  if (row === undefined || row.database === row.here) return undefined;
  if (row.slot_type === 'logical') return otherDatabaseError(names.slot, row.database);
  return new OutboxError(
    `replication slot "${names.slot}" is a ${row.slot_type} slot, not a logical slot of this database: ` +
      'name another slot with --slot',
    { code: CDC_SLOT_MISMATCH },
  );
}

/** The settings the checks read (SETTINGS_SQL). */
export interface CdcSettings {
  readonly wal_level: string;
  readonly max_slot_wal_keep_size: string;
  /** The role may start a walsender (REPLICATION or superuser); undefined: not read, not checked. */
  readonly replication?: boolean;
  readonly role?: string;
}

export interface CdcCheck {
  /** Problems that do not stop the relay (logged as warnings by checkCdc). */
  readonly warnings: readonly string[];
}

/**
 * The verdict of the checks, from the settings and the slot row (pure: the messages are tested
 * without changing the server). Throws the first error; returns the warnings.
 */
export function cdcProblems(names: CdcNames, settings: CdcSettings, slot: SlotRow | undefined): CdcCheck {
  if (settings.wal_level !== 'logical') {
    throw new OutboxError(
      `wal_level is "${settings.wal_level}": the CDC relay needs wal_level = logical. Set it ` +
        "(ALTER SYSTEM SET wal_level = 'logical', or wal_level = logical in postgresql.conf; on a managed " +
        'database, its logical replication parameter) and restart PostgreSQL; or run the polling relay ' +
        '(tx-outbox relay without --source cdc)',
      { code: CDC_WAL_LEVEL },
    );
  }
  if (settings.replication === false) {
    throw new OutboxError(
      `role "${settings.role ?? 'current_user'}" has neither REPLICATION nor superuser: the CDC relay cannot ` +
        `stream. Grant it (ALTER ROLE "${settings.role ?? '<role>'}" REPLICATION; on a managed database, its ` +
        'replication role or grant), or run the polling relay (tx-outbox relay without --source cdc)',
      { code: CDC_NO_REPLICATION },
    );
  }
  if (slot?.exists) {
    const mismatch = slotMismatch(names, slot);
    if (mismatch !== undefined) throw mismatch;
    if (slot.wal_status === 'lost') throw slotLostError(names, slot.confirmed_lsn);
  }
  const warnings: string[] = [];
  if (settings.max_slot_wal_keep_size === '-1') {
    warnings.push(
      `max_slot_wal_keep_size is -1: a stopped or stuck CDC relay makes slot "${names.slot}" retain WAL ` +
        'without bound, until the disk is full. Bound it (ALTER SYSTEM SET max_slot_wal_keep_size = ' +
        "'50GB'; SELECT pg_reload_conf()) and alert on tx_outbox_cdc_slot_lag_bytes; past the bound the slot is " +
        'lost, which the relay reports instead of skipping events',
    );
  }
  return { warnings };
}

/** The slot's WAL was removed: what may be missing and how to recover. Never skipped silently. */
export function slotLostError(names: CdcNames, confirmedLsn: string | null): OutboxError {
  return new OutboxError(
    `replication slot "${names.slot}" is lost (wal_status = 'lost': PostgreSQL removed WAL it still needed, ` +
      `max_slot_wal_keep_size). It had confirmed up to LSN ${confirmedLsn ?? '(none)'}; events committed after ` +
      'it that were never streamed may be missing from the broker. Recovery: WAL-mode events (via: "wal") ' +
      'committed after that LSN are gone from PostgreSQL and must be re-sent from their source; table-mode ' +
      `events are still in "${names.schema}".events: deliver them with the polling relay (tx-outbox relay ` +
      'without --source cdc) until the table is drained, then run `tx-outbox cdc drop-slot --yes` and ' +
      '`tx-outbox migrate --cdc` to start streaming again',
    { code: CDC_SLOT_LOST },
  );
}

/**
 * The relay's start checks: wal_level = logical, the slot (if it exists) a pgoutput slot of this
 * database and not lost. Unbounded WAL retention is logged as a warning.
 */
export async function checkCdc(
  pool: Pool,
  names: CdcNames,
  logger: Logger = silentLogger,
): Promise<CdcCheck> {
  const settings = (await pool.query<CdcSettings>(SETTINGS_SQL)).rows[0]!;
  // wal_level first, before the slot read (which also needs migration 11) can fail otherwise.
  cdcProblems(names, settings, undefined);
  const check = cdcProblems(names, settings, await readSlot(pool, names));
  for (const warning of check.warnings) logger.warn({ slot: names.slot }, warning);
  return check;
}

export interface CdcSlotStatus {
  readonly slot: string;
  readonly publication: string;
  readonly exists: boolean;
  readonly active: boolean;
  readonly activePid: number | null;
  /** pg_replication_slots.wal_status: reserved, extended, unreserved or lost. */
  readonly walStatus: string | null;
  /** The slot's confirmed_flush_lsn, as PostgreSQL prints it (`16/B374D848`). */
  readonly confirmedLsn: string | null;
  /** pg_current_wal_lsn() − confirmed_flush_lsn. */
  readonly lagBytes: number | null;
  /** Age of the oldest event the streaming relay has not settled, as it last wrote it (cdc_state). */
  readonly lagSeconds: number | null;
  /** When the relay wrote lagSeconds; a stale time means no relay is streaming. */
  readonly measuredAt: Date | null;
  /** pg_current_wal_lsn() − restart_lsn: the WAL PostgreSQL keeps for the slot. */
  readonly retainedBytes: number | null;
}

const bytes = (text: string | null): number | null => (text === null ? null : Number(text));

/**
 * The slot's state and lag; `exists: false` (and nulls) when there is no such slot. A slot of the
 * name in another database is not this one's: TXO_CDC_SLOT_MISMATCH, naming that database.
 */
export async function cdcSlotStatus(pool: Pool, options: CdcNameOptions = {}): Promise<CdcSlotStatus> {
  const names = await resolveCdcNames(pool, options);
  const row = await readSlot(pool, names);
  if (row.exists && row.same_database !== true) {
    const foreign = await foreignSlot(pool, names);
    if (foreign !== undefined) throw foreign;
  }
  return {
    slot: names.slot,
    publication: names.publication,
    exists: row.exists,
    active: row.active,
    activePid: row.active_pid,
    walStatus: row.wal_status,
    confirmedLsn: row.confirmed_lsn,
    lagBytes: bytes(row.lag_bytes),
    lagSeconds: row.lag_seconds,
    measuredAt: row.measured_at,
    retainedBytes: bytes(row.retained_bytes),
  };
}

export interface DropCdcSlotOptions extends CdcNameOptions {
  /** End the walsender streaming the slot first (pg_terminate_backend) instead of refusing. */
  readonly terminate?: boolean;
}

export interface DropCdcSlotResult {
  /** Whether the slot was dropped (false: this database had none of that name). */
  readonly slot: boolean;
  readonly publication: boolean;
  /** The slot's name (the default resolved). */
  readonly slotName: string;
}

/**
 * Drops this database's slot and the publication (each if present). Refuses, with
 * TXO_CDC_SLOT_ACTIVE, while a relay streams the slot, unless `terminate`; and, with
 * TXO_CDC_SLOT_MISMATCH and nothing dropped, a slot of the name in another database (the drop
 * itself matches the database, in one statement, so no race can drop another database's slot).
 * WAL-mode events the slot had not confirmed are gone with it: the caller says so to the operator.
 */
export async function dropCdcSlot(pool: Pool, options: DropCdcSlotOptions = {}): Promise<DropCdcSlotResult> {
  const names = await resolveCdcNames(pool, options);
  const foreign = await foreignSlot(pool, names);
  if (foreign !== undefined) throw foreign;
  if (options.terminate) await takeOverSlot(pool, names.slot);
  let slot = false;
  try {
    slot = ((await pool.query(DROP_SLOT_SQL, [names.slot])).rowCount ?? 0) > 0;
  } catch (error) {
    if (pgCode(error) === OBJECT_IN_USE) throw slotActiveError(names.slot, error);
    if (pgCode(error) !== UNDEFINED_OBJECT) throw error;
  }
  if (!slot) {
    // Gone, or (created since the check above) another database's: say which, drop nothing more.
    const late = await foreignSlot(pool, names);
    if (late !== undefined) throw late;
  }
  const found = await pool.query(PUBLICATION_SQL, [names.publication, names.schema]);
  if (found.rows.length > 0) await pool.query(publicationSql(DROP_PUBLICATION_SQL, names));
  return { slot, publication: found.rows.length > 0, slotName: names.slot };
}

function slotActiveError(slot: string, cause: unknown): OutboxError {
  const pid = /PID (\d+)/i.exec((cause as Error).message)?.[1];
  return new OutboxError(
    `replication slot "${slot}" is in use${pid === undefined ? '' : ` by the walsender PID ${pid}`}: stop the CDC relay first`,
    { code: CDC_SLOT_ACTIVE, retryable: true, cause },
  );
}

export interface TakeOverSlotOptions {
  /** How long to wait for the slot to become inactive after the termination. Default 10000. */
  readonly timeoutMs?: number;
  readonly logger?: Logger;
}

/**
 * Ends whoever streams `slot` of this database (pg_terminate_backend of its active_pid; another
 * database's slot of the name is never touched) and waits until the slot is inactive. Only for a relay that has just (re)verified it holds every partition lease: the
 * holder is then a relay that lost them (paused, partitioned away) and must not stream on.
 * Rejects with TXO_CDC_SLOT_ACTIVE (retryable) when the slot stays active.
 */
export async function takeOverSlot(
  pool: Pool,
  slot: string,
  options: TakeOverSlotOptions = {},
): Promise<void> {
  checkedName('slot', slot);
  const logger = options.logger ?? silentLogger;
  const deadline = performance.now() + (options.timeoutMs ?? 10_000);
  for (;;) {
    const ended = await pool.query<{ pid: number; terminated: boolean }>(TERMINATE_SLOT_HOLDER_SQL, [slot]);
    const holder = ended.rows[0];
    if (holder === undefined) return;
    logger.warn(
      { slot, pid: holder.pid, terminated: holder.terminated },
      'replication slot was still streamed by another backend (a relay that lost its leases): terminated it',
    );
    // The slot is released once that walsender has exited; the next loop terminates a newcomer too.
    while (performance.now() < deadline) {
      await sleep(25);
      const { rows } = await pool.query<{ active: boolean; active_pid: number | null }>(SLOT_ACTIVE_SQL, [
        slot,
      ]);
      if (rows[0] === undefined || !rows[0].active) return;
      if (rows[0].active_pid !== holder.pid) break;
    }
    if (performance.now() >= deadline) {
      throw new OutboxError(
        `replication slot "${slot}" is still active after terminating its walsender PID ${holder.pid}`,
        {
          code: CDC_SLOT_ACTIVE,
          retryable: true,
        },
      );
    }
  }
}
