import type { Pool, PoolClient } from 'pg';
import { OutboxValidationError } from '../errors.js';
import { Checkout } from './checkout.js';
import { quoteSchema, withSchema } from './identifiers.js';
import { MIGRATIONS } from './sql.generated.js';

export interface MigrateOptions {
  /** Schema that holds the outbox tables. Default `outbox`. */
  readonly schema?: string;
  /** Number of outbox partitions, fixed when the schema is created. Default 16. */
  readonly partitions?: number;
}

export interface MigrationSql {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

export interface MigrateResult {
  readonly applied: readonly number[];
  readonly current: number;
}

export const DEFAULT_SCHEMA = 'outbox';
export const DEFAULT_PARTITIONS = 16;

function validatePartitions(partitions: number): number {
  if (!Number.isInteger(partitions) || partitions < 1 || partitions > 1024) {
    throw new OutboxValidationError(
      'partitions',
      `${String(partitions)} is not a valid partition count`,
      'Pass an integer from 1 to 1024 (default 16); it is fixed once the schema exists.',
    );
  }
  return partitions;
}

/**
 * The migration SQL with the schema name and partition count filled in, for
 * teams that run their own migration tool. Apply in version order, each in
 * its own transaction, after `CREATE SCHEMA`.
 */
export function migrationSql(options: MigrateOptions = {}): MigrationSql[] {
  const schema = quoteSchema(options.schema ?? DEFAULT_SCHEMA);
  const partitions = validatePartitions(options.partitions ?? DEFAULT_PARTITIONS);
  return MIGRATIONS.map((m) => ({
    version: m.version,
    name: m.name,
    sql: withSchema(m.sql, schema).replaceAll('{{partitions}}', String(partitions)),
  }));
}

const LOCK_KEY_SQL = `SELECT hashtextextended('tx-outbox:migrate:' || $1::text, 0) AS key`;
const SCHEMA_EXISTS_SQL = 'SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AS present';
/** Whether the migrations table exists (reading its name needs USAGE on the schema). */
const MIGRATIONS_TABLE_SQL = 'SELECT to_regclass($1) IS NOT NULL AS present';

/**
 * Creates or upgrades the outbox schema. Each numbered migration runs once, in
 * its own transaction, recorded in `<schema>.migrations`. Safe to call from
 * several processes at once (advisory lock) and idempotent. On an up-to-date
 * schema it only reads the applied versions (and the partition count): a role
 * without DDL rights may call it at startup (docs/operations.md, Least privilege).
 */
export async function migrate(pool: Pool, options: MigrateOptions = {}): Promise<MigrateResult> {
  const schemaName = options.schema ?? DEFAULT_SCHEMA;
  const schema = quoteSchema(schemaName);
  const migrations = migrationSql(options);
  const lease = await Checkout.of(pool);
  const { client } = lease;
  try {
    let result: MigrateResult;
    if (isUpToDate(await appliedVersions(client, schemaName), migrations)) {
      if (options.partitions !== undefined) await checkPartitions(client, schema, options.partitions);
      result = { applied: [], current: currentVersion(migrations) };
    } else {
      const { rows } = await client.query<{ key: string }>(LOCK_KEY_SQL, [schemaName]);
      const key = rows[0]!.key;
      await client.query('SELECT pg_advisory_lock($1::bigint)', [key]);
      try {
        result = await applyPending(client, schemaName, migrations, options.partitions);
      } finally {
        await client.query('SELECT pg_advisory_unlock($1::bigint)', [key]);
      }
    }
    lease.release();
    return result;
  } catch (error) {
    // A connection in an unknown state (a transaction or the session lock still held) must not go back to the pool.
    lease.release(error ?? true);
    throw error;
  }
}

/** The versions applied so far; none before the migrations table exists. */
async function appliedVersions(client: PoolClient, schemaName: string): Promise<Set<number>> {
  const table = `${quoteSchema(schemaName)}.migrations`;
  const { rows } = await client.query<{ present: boolean }>(MIGRATIONS_TABLE_SQL, [table]);
  if (!rows[0]?.present) return new Set();
  const done = await client.query<{ version: number }>(`SELECT version FROM ${table}`);
  return new Set(done.rows.map((r) => r.version));
}

function isUpToDate(applied: ReadonlySet<number>, migrations: readonly MigrationSql[]): boolean {
  return migrations.every((m) => applied.has(m.version));
}

function currentVersion(migrations: readonly MigrationSql[]): number {
  return Math.max(0, ...migrations.map((m) => m.version));
}

async function applyPending(
  client: PoolClient,
  schemaName: string,
  migrations: readonly MigrationSql[],
  partitions: number | undefined,
): Promise<MigrateResult> {
  const schema = quoteSchema(schemaName);
  // CREATE SCHEMA checks the database's CREATE privilege even when the schema exists: only
  // when it is missing, so a migrator that owns the schema needs no right on the database.
  const exists = await client.query<{ present: boolean }>(SCHEMA_EXISTS_SQL, [schemaName]);
  if (!exists.rows[0]?.present) await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
  await client.query(
    `CREATE TABLE IF NOT EXISTS ${schema}.migrations (
       version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
  );
  const have = await appliedVersions(client, schemaName);
  const applied: number[] = [];
  for (const m of migrations) {
    if (have.has(m.version)) continue;
    await client.query('BEGIN');
    try {
      await client.query(m.sql);
      await client.query(`INSERT INTO ${schema}.migrations (version, name) VALUES ($1, $2)`, [
        m.version,
        m.name,
      ]);
      await client.query('COMMIT');
    } catch (error) {
      await client.query('ROLLBACK');
      throw error;
    }
    applied.push(m.version);
  }
  if (partitions !== undefined) await checkPartitions(client, schema, partitions);
  return { applied, current: currentVersion(migrations) };
}

async function checkPartitions(client: PoolClient, schema: string, wanted: number): Promise<void> {
  const { rows } = await client.query<{ partitions: number }>(`SELECT partitions FROM ${schema}.config`);
  const actual = rows[0]?.partitions;
  if (actual !== undefined && actual !== wanted) {
    throw new OutboxValidationError(
      'partitions',
      `the schema was created with ${actual} partitions, not ${wanted}`,
      'The partition count is fixed once created: omit the option, or drain the outbox and re-create the schema.',
    );
  }
}
