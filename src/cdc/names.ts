import type { Pool, PoolClient } from 'pg';
import { type CdcNameOptions, type CdcNames, cdcNames, checkedName } from '../schema/cdc-names.js';
import { DEFAULT_SLOT_SQL } from './setup-sql.js';

type Queryable = Pool | PoolClient;

/**
 * The names with the slot resolved: the one given, else this database's default slot of the
 * schema (DEFAULT_SLOT_SQL: `txo_<database>_<schema>_<hash>`, or `txo_<schema>` while this
 * database has a slot of that name). The names themselves and their checks are the schema's
 * (src/schema/cdc-names.ts), which the producer's WAL mode reads too.
 */
export async function resolveCdcNames(db: Queryable, options: CdcNameOptions = {}): Promise<CdcNames> {
  const choice = cdcNames(options);
  if (choice.slot !== undefined) return { ...choice, slot: choice.slot };
  const { rows } = await db.query<{ slot: string }>(DEFAULT_SLOT_SQL, [choice.schema]);
  return { ...choice, slot: checkedName('slot', rows[0]!.slot) };
}
