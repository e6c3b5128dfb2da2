/**
 * WAL mode's door check: a WAL-mode event exists only in the WAL, so without a logical slot that
 * will decode it (wal_level = logical, the slot present, of this database, pgoutput, not lost) it
 * would be gone as soon as the WAL is recycled. `enqueue` refuses instead, writing nothing. The
 * check is one small SELECT on the caller's transaction, at most once per 5 s per database, schema
 * and slot in this process; its verdict (either way) serves every call meanwhile. A verdict is
 * kept only for a handle that tells which database it is connected to (a node-postgres client's
 * `connectionParameters`): one database's slot says nothing of another's (a tenant per database,
 * the same schema name in each), so a handle that cannot tell is checked on every call.
 * The default slot is resolved in the same statement, from current_database(), exactly as the
 * CDC relay resolves it (defaultSlotSql): a producer never checks another database's slot.
 */
import { OutboxError } from '../errors.js';
import { CDC_WAL_LEVEL, cdcNames, defaultSlotSql } from '../schema/cdc-names.js';
import { namedStatement, type Statement } from '../schema/statement.js';
import type { SqlExecutor } from './executor.js';

/**
 * What WAL mode needs of the database: wal_level = logical and a live pgoutput slot of this
 * database, else the messages would decode for no one (or not be written to the WAL at all).
 * $1 the slot given (null: the schema's default slot in this database), $2 the schema. A slot of
 * the name in another database is found only to be refused by name.
 */
export const WAL_SLOT_CHECK_SQL = `
SELECT current_setting('wal_level') AS wal_level,
       n.name AS slot,
       s.slot_name IS NOT NULL AS exists,
       s.plugin,
       s.slot_type,
       s.database::text AS database,
       s.database = current_database() AS here,
       s.wal_status
FROM (SELECT coalesce($1::text, ${defaultSlotSql('$2::text')}) AS name) AS n
LEFT JOIN pg_catalog.pg_replication_slots s ON s.slot_name = n.name`;

/** How long one check's verdict serves this process, per database, schema and slot. */
export const WAL_SLOT_CACHE_MS = 5000;

/** No slot that decodes WAL-mode events (the replication stream's code for a missing slot too). */
export const CDC_NO_SLOT = 'TXO_CDC_NO_SLOT';

/**
 * The slot WAL-mode events of `schema` are for, validated as the CDC relay's: `slot`, or undefined
 * for the schema's default slot in the database of the transaction (resolved by the check).
 */
export function walSlotName(schema: string, slot: string | undefined): string | undefined {
  return cdcNames({ schema, ...(slot === undefined ? {} : { slot }) }).slot;
}

interface SlotRow {
  wal_level: string;
  /** The slot checked: the one given, or the default resolved. */
  slot: string;
  exists: boolean;
  plugin: string | null;
  slot_type: string | null;
  database: string | null;
  here: boolean | null;
  wal_status: string | null;
}

interface Verdict {
  readonly error: OutboxError | undefined;
  readonly at: number;
}

/** The refusal for a check's row, or undefined when WAL mode can write. */
export function slotRefusal(row: SlotRow | undefined, schema: string): OutboxError | undefined {
  const wal = "enqueue(…, { via: 'wal' })";
  if (row?.wal_level !== 'logical') {
    return new OutboxError(
      `${wal} needs wal_level = logical, and this server has wal_level = ${row?.wal_level ?? 'unknown'}: ` +
        'the events would never be decoded. Set it (ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL, ' +
        'or enqueue into the table (without via)',
      { code: CDC_WAL_LEVEL },
    );
  }
  let problem: string | undefined;
  if (!row.exists) problem = 'does not exist';
  else if (row.slot_type !== 'logical' || row.plugin !== 'pgoutput')
    problem = `is not a pgoutput logical slot (${row.slot_type ?? '?'}, plugin ${row.plugin ?? 'none'})`;
  else if (!row.here)
    problem = `belongs to another database ("${row.database ?? '?'}"), not to the one this transaction is in`;
  else if (row.wal_status === 'lost') problem = 'is lost (wal_status lost: the WAL it needed was removed)';
  if (problem === undefined) return undefined;
  return new OutboxError(
    `${wal}: the replication slot "${row.slot}" of schema "${schema}" ${problem}, so WAL-mode events would be ` +
      `lost; nothing was written. Run \`tx-outbox migrate --cdc${schema === 'outbox' ? '' : ` --schema ${schema}`}\` ` +
      "(or ensureCdcSlot) to create it, pass the slot option naming the CDC relay's slot, or enqueue into the table (without via)",
    { code: CDC_NO_SLOT },
  );
}

/**
 * The database a handle is connected to, as `host:port/database`, when it can tell: a
 * node-postgres Client or PoolClient (`connectionParameters`); else undefined.
 */
export function databaseOf(tx: unknown): string | undefined {
  const p = (tx as { connectionParameters?: { host?: unknown; port?: unknown; database?: unknown } } | null)
    ?.connectionParameters;
  if (typeof p?.database !== 'string' || p.database === '') return undefined;
  return `${String(p.host)}:${String(p.port)}/${p.database}`;
}

/** The per-process cache of slot checks. */
export class WalSlotGate {
  readonly #verdicts = new Map<string, Verdict>();
  readonly #statements = new Map<boolean, Statement>();

  constructor(private readonly now: () => number = () => performance.now()) {}

  /**
   * Throws TXO_CDC_NO_SLOT / TXO_CDC_WAL_LEVEL unless the slot (undefined: the schema's default
   * slot in this database) can decode WAL-mode events.
   */
  async check(tx: SqlExecutor, schema: string, slot: string | undefined, prepared: boolean): Promise<void> {
    const database = databaseOf(tx);
    const key = database === undefined ? undefined : `${database}\u0000${schema}\u0000${slot ?? ''}`;
    const cached = key === undefined ? undefined : this.#verdicts.get(key);
    const now = this.now();
    if (cached && now - cached.at < WAL_SLOT_CACHE_MS) {
      if (cached.error) throw cached.error;
      return;
    }
    let statement = this.#statements.get(prepared);
    if (!statement) {
      statement = namedStatement('txo_wal_slot', WAL_SLOT_CHECK_SQL, prepared);
      this.#statements.set(prepared, statement);
    }
    const { rows } = await tx.query<SlotRow>({ ...statement, values: [slot ?? null, schema] });
    const error = slotRefusal(rows[0], schema);
    if (key !== undefined) this.#verdicts.set(key, { error, at: now });
    if (error) throw error;
  }

  /** Forgets every verdict (tests, and after creating a slot in this process). */
  reset(): void {
    this.#verdicts.clear();
  }
}

/** The process-wide gate `enqueue` uses. */
export const walSlotGate = new WalSlotGate();
