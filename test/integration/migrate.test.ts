import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { migrate, migrationSql } from '../../src/schema/migrate.js';
import { DATABASE_URL } from '../helpers/env.js';

const pools: pg.Pool[] = [];
const schemas: string[] = [];
afterAll(async () => {
  const admin = new pg.Pool({ connectionString: DATABASE_URL });
  for (const s of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
  await admin.end();
  await Promise.all(pools.map((p) => p.end()));
});

function fresh(): string {
  const s = `t_migrate_${randomBytes(4).toString('hex')}`;
  schemas.push(s);
  return s;
}

function pool(): pg.Pool {
  const p = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
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
});
