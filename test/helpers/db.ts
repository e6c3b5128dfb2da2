import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { migrate } from '../../src/schema/migrate.js';
import { DATABASE_URL } from './env.js';

export interface TestDb {
  readonly pool: pg.Pool;
  readonly schema: string;
  /** Drops the schema (only when asked: a failing test's state stays for inspection) and ends the pool. */
  close(options?: { drop?: boolean }): Promise<void>;
}

/** A fresh, migrated outbox schema of its own for one test file. */
export async function createTestDb(
  prefix: string,
  options: { partitions?: number; max?: number } = {},
): Promise<TestDb> {
  const schema = `t_${prefix.replace(/[^a-z0-9_]/g, '_')}_${randomBytes(4).toString('hex')}`;
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: options.max ?? 10 });
  await migrate(pool, { schema, partitions: options.partitions ?? 16 });
  return {
    pool,
    schema,
    async close({ drop = true } = {}) {
      if (drop) await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    },
  };
}

export { inTransaction } from '../../src/producer/transaction.js';

export async function waitFor(
  check: () => Promise<boolean> | boolean,
  { timeoutMs = 20_000, intervalMs = 50, what = 'condition' } = {},
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}
