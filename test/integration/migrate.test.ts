import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { migrate, migrationSql } from '../../src/schema/migrate.js';
import { DATABASE_URL } from '../helpers/env.js';

const pools: pg.Pool[] = [];
const schemas: string[] = [];
const roles: string[] = [];
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end()));
  const admin = new pg.Pool({ connectionString: DATABASE_URL });
  for (const s of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
  for (const r of roles) await admin.query(`DROP ROLE IF EXISTS "${r}"`);
  await admin.end();
});

function fresh(): string {
  const s = `t_migrate_${randomBytes(4).toString('hex')}`;
  schemas.push(s);
  return s;
}

function pool(user?: string): pg.Pool {
  const url = new URL(DATABASE_URL);
  if (user !== undefined) url.username = user;
  const p = new pg.Pool({ connectionString: url.toString(), max: 2 });
  pools.push(p);
  return p;
}

describe('migrate', () => {
  it('is safe when several processes migrate at once, and applies each migration once', async () => {
    const schema = fresh();
    const results = await Promise.all(
      Array.from({ length: 5 }, () => migrate(pool(), { schema, partitions: 8 })),
    );
    const applied = results.flatMap((r) => r.applied);
    expect(applied).toEqual(migrationSql().map((m) => m.version));
    const p = pool();
    const { rows } = await p.query(`SELECT count(*)::int AS n FROM "${schema}".partitions`);
    expect(rows[0].n).toBe(8);
    const again = await migrate(p, { schema });
    expect(again.applied).toEqual([]);
  });

  it('refuses to change the partition count of an existing schema', async () => {
    const schema = fresh();
    const p = pool();
    await migrate(p, { schema, partitions: 4 });
    await expect(migrate(p, { schema, partitions: 16 })).rejects.toThrow(/created with 4 partitions/);
  });

  it('validates the schema name and the partition count', async () => {
    await expect(migrate(pool(), { schema: 'Robert"); DROP' })).rejects.toBeInstanceOf(OutboxValidationError);
    await expect(migrate(pool(), { schema: fresh(), partitions: 0 })).rejects.toThrow(/partitions/);
  });

  it('exports the SQL with the schema and partition count filled in', () => {
    const [first] = migrationSql({ schema: 'billing_outbox', partitions: 32 });
    expect(first!.sql).toContain('"billing_outbox".events');
    expect(first!.sql).toContain('generate_series(0, 32 - 1)');
    expect(first!.sql).not.toContain('{{');
  });

  it('on an up-to-date schema needs no DDL right: it reads the versions, waits for no lock, creates nothing', async () => {
    const schema = fresh();
    await migrate(pool(), { schema, partitions: 4 });
    // A role that may only read the schema's version and shape (roles are cluster-wide: a unique name).
    const reader = `${schema}_reader`;
    roles.push(reader);
    const admin = pool();
    await admin.query(`CREATE ROLE "${reader}" LOGIN`);
    await admin.query(`GRANT USAGE ON SCHEMA "${schema}" TO "${reader}"`);
    await admin.query(`GRANT SELECT ON "${schema}".migrations, "${schema}".config TO "${reader}"`);
    // Another migrator holds the lock: an up-to-date check must not wait for it.
    const holder = await admin.connect();
    let result: Awaited<ReturnType<typeof migrate>>;
    try {
      await holder.query(`SELECT pg_advisory_lock(hashtextextended('tx-outbox:migrate:' || $1::text, 0))`, [
        schema,
      ]);
      const timeout = new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error('migrate waited for the lock')), 5000).unref(),
      );
      result = await Promise.race([migrate(pool(reader), { schema, partitions: 4 }), timeout]);
    } finally {
      holder.release(true);
    }
    expect(result).toEqual({ applied: [], current: migrationSql().at(-1)!.version });
    // Pending work still needs the rights, and says so.
    await admin.query(`DELETE FROM "${schema}".migrations WHERE version = $1`, [result.current]);
    await expect(migrate(pool(reader), { schema })).rejects.toThrow(/permission denied for schema/);
    await admin.query(`REVOKE ALL ON SCHEMA "${schema}" FROM "${reader}"`);
    await admin.query(`REVOKE ALL ON ALL TABLES IN SCHEMA "${schema}" FROM "${reader}"`);
  });
});
