import type { Pool, PoolClient } from 'pg';
import { OutboxValidationError } from '../errors.js';
import { quoteSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import { DEFAULT_SLOT_SQL } from './setup-sql.js';

/** The CDC relay's names: the schema, the slot (given, or this database's default), the publication. */

export interface CdcNameOptions {
  /** Schema that holds the outbox tables. Default `outbox`. */
  readonly schema?: string;
  /**
   * Replication slot. Default: this database's slot of the schema, `txo_<database>_<schema>_<hash>`
   * (or `txo_<schema>` while a slot of that name exists in this database; docs/cdc.md).
   */
  readonly slot?: string;
  /** Publication (one database's object). Default `txo_<schema>`. */
  readonly publication?: string;
}

/** The validated names as given: `slot` undefined stands for this database's default slot. */
export interface CdcNameChoice {
  readonly schema: string;
  readonly slot: string | undefined;
  readonly publication: string;
}

/** The names with the slot resolved (resolveCdcNames). */
export interface CdcNames {
  readonly schema: string;
  readonly slot: string;
  readonly publication: string;
}

type Queryable = Pool | PoolClient;

// Slot names may hold only lowercase letters, digits and underscores (PostgreSQL's own rule),
// 63 bytes at most; the publication follows the same rule so it needs no case-folding care.
const NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export function checkedName(field: string, name: string): string {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new OutboxValidationError(
      field,
      `${JSON.stringify(name)} is not a valid ${field} name`,
      'Use 1-63 characters: lowercase letters, digits and underscores, not starting with a digit.',
    );
  }
  return name;
}

/**
 * The validated names; the publication defaults to `txo_<schema>` (schema names fit: 58 at most),
 * the slot to undefined: this database's default, which only the database can tell
 * (resolveCdcNames). `cdcNames('orders', { slot })` is the same as `cdcNames({ schema: 'orders', slot })`.
 */
export function cdcNames(
  schemaOrOptions: string | CdcNameOptions = {},
  more: Omit<CdcNameOptions, 'schema'> = {},
): CdcNameChoice {
  const options =
    typeof schemaOrOptions === 'string' ? { ...more, schema: schemaOrOptions } : schemaOrOptions;
  const schema = options.schema ?? DEFAULT_SCHEMA;
  quoteSchema(schema);
  return {
    schema,
    slot: options.slot === undefined ? undefined : checkedName('slot', options.slot),
    publication: checkedName('publication', options.publication ?? `txo_${schema}`),
  };
}

/**
 * The names with the slot resolved: the one given, else this database's default slot of the
 * schema (DEFAULT_SLOT_SQL: `txo_<database>_<schema>_<hash>`, or `txo_<schema>` while this
 * database has a slot of that name).
 */
export async function resolveCdcNames(db: Queryable, options: CdcNameOptions = {}): Promise<CdcNames> {
  const choice = cdcNames(options);
  if (choice.slot !== undefined) return { ...choice, slot: choice.slot };
  const { rows } = await db.query<{ slot: string }>(DEFAULT_SLOT_SQL, [choice.schema]);
  return { ...choice, slot: checkedName('slot', rows[0]!.slot) };
}
