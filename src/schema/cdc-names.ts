/**
 * What the CDC relay and a WAL-mode producer agree on about the CDC objects of an outbox schema:
 * their names (`cdcNames`: the slot and the publication, validated; `defaultSlotSql`: this
 * database's default slot, computed in SQL) and the code of a database that cannot decode WAL
 * messages (`CDC_WAL_LEVEL`). The relay creates and checks the objects (cdc/setup.ts); the
 * producer refuses to write WAL messages no slot will decode (producer/wal-slot.ts).
 */
import { OutboxValidationError } from '../errors.js';
import { quoteSchema } from './identifiers.js';
import { DEFAULT_SCHEMA } from './migrate.js';

/** wal_level is below logical: nothing decodes WAL messages (TXO_CDC_WAL_LEVEL). */
export const CDC_WAL_LEVEL = 'TXO_CDC_WAL_LEVEL';

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

// Slot names may hold only lowercase letters, digits and underscores (PostgreSQL's own rule),
// 63 bytes at most; the publication follows the same rule so it needs no case-folding care.
const NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/** `name` when it is a valid slot or publication name; else OutboxValidationError naming `field`. */
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
 * The default slot of an outbox schema in this database, as an SQL expression of the schema
 * (`schema`: a text parameter such as `$1::text`). Replication slots are cluster-wide, so the name
 * carries the database: `txo_<database>_<schema>_<hash>` — the database name lowercased with
 * every character other than a-z, 0-9 and _ made `_`, the whole cut to 54 characters, then `_`
 * and the first 8 hex digits of sha256('<database>/<schema>'), so distinct databases and schemas
 * keep distinct names within PostgreSQL's 63 (`txo_shop_outbox_c6fa275c`). A slot `txo_<schema>`
 * of THIS database (the default before 0.1.0) stays the default while it exists. Computed in SQL,
 * so the relay, the CLI and `enqueue(…, { via: 'wal' })` resolve the same name from
 * current_database() whatever the client calls the database (a pooler alias, PGDATABASE).
 */
export function defaultSlotSql(schema: string): string {
  return `(CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots
                          WHERE slot_name = 'txo_' || ${schema} AND database = current_database())
      THEN 'txo_' || ${schema}
      ELSE left('txo_' || regexp_replace(translate(current_database(), 'ABCDEFGHIJKLMNOPQRSTUVWXYZ',
                                                   'abcdefghijklmnopqrstuvwxyz'), '[^a-z0-9_]', '_', 'g')
                || '_' || ${schema}, 54)
           || '_' || left(encode(sha256(convert_to(current_database() || '/' || ${schema}, 'UTF8')), 'hex'), 8)
 END)`;
}
