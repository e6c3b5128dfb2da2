/** The demo's database: the given one (in a fresh schema, dropped at the end) or an embedded PostgreSQL. */

import { randomBytes } from 'node:crypto';
import type { Pool } from 'pg';
import type { Logger as PinoLogger } from 'pino';
import { quoteSchema, withSchema } from '../../schema/identifiers.js';
import { createPool } from '../common.js';
import { startEmbedded } from './embedded-postgres.js';
import type { Cleanup } from './lifecycle.js';

const DROP_SCHEMA_SQL = 'DROP SCHEMA IF EXISTS {{schema}} CASCADE';
const SERVER_VERSION_SQL = 'SHOW server_version';

export interface Database {
  readonly pool: Pool;
  readonly schema: string;
  readonly label: string;
  /** For the consumer's pool of its own. */
  readonly url: string;
}

/** `sql` with `{{schema}}` replaced by the quoted schema name. */
export function withSchemaName(sql: string, schema: string): string {
  return withSchema(sql, quoteSchema(schema));
}

/** Connects (`poolSize` connections at most); without a URL it starts an embedded PostgreSQL first. */
export async function openDatabase(
  options: { readonly databaseUrl?: string },
  poolSize: number,
  logger: PinoLogger,
  cleanup: Cleanup,
  signal: AbortSignal,
): Promise<Database> {
  const given = options.databaseUrl ?? process.env['DATABASE_URL'];
  const embedded = given === undefined || given.trim() === '';
  const url = embedded ? await startEmbedded(logger, cleanup, signal) : given;
  const pool = createPool(url, logger, poolSize);
  cleanup.add('close the pool', () => pool.end());
  const schema = `txo_demo_${randomBytes(4).toString('hex')}`;
  const version = (await pool.query<{ server_version: string }>(SERVER_VERSION_SQL)).rows[0]?.server_version;
  if (!embedded) {
    cleanup.add('drop the demo schema', () => pool.query(withSchemaName(DROP_SCHEMA_SQL, schema)));
  }
  const where = embedded ? 'embedded PostgreSQL' : 'PostgreSQL (given database)';
  return { pool, schema, label: `${where} ${version ?? ''}`.trim(), url };
}
