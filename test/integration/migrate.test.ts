import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { createInbox } from '../../src/inbox/inbox.js';
import type { InboxMessage } from '../../src/inbox/message.js';
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

  it('upgrades an inbox holding version-3 rows: old deferral counts are no handler failures, old gap quarantines block', async () => {
    const schema = fresh();
    const p = pool();
    // The schema as version 3 left it, with the rows the version-3 inbox wrote.
    await p.query(`CREATE SCHEMA "${schema}"`);
    await p.query(
      `CREATE TABLE "${schema}".migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    for (const m of migrationSql({ schema }).filter((m) => m.version <= 3)) {
      await p.query(m.sql);
      await p.query(`INSERT INTO "${schema}".migrations (version, name) VALUES ($1, $2)`, [
        m.version,
        m.name,
      ]);
    }
    const consumer = 'inventory';
    const message = (aggregateId: string, sequence: number): InboxMessage => ({
      eventId: randomUUID(),
      type: 'stock.reserved',
      aggregateType: 'order',
      aggregateId,
      sequence,
      schemaVersion: 1,
      payload: Buffer.from('{}'),
      headers: {},
    });
    const [a2, a3, b3, b4] = [message('a', 2), message('a', 3), message('b', 3), message('b', 4)];
    await p.query(
      `INSERT INTO "${schema}".inbox_positions (consumer, aggregate_type, aggregate_id, last_sequence, previous_sequence)
       VALUES ($1, 'order', 'a', 1, 0), ($1, 'order', 'b', 1, 0)`,
      [consumer],
    );
    // a3 was deferred 40 times on its gap (version 3 counted those with handler failures) …
    await p.query(
      `INSERT INTO "${schema}".inbox_attempts (consumer, event_id, attempts, first_at, last_reason)
       VALUES ($1, $2, 40, now() - interval '1 minute', 'waiting for sequence 2 of this aggregate')`,
      [consumer, a3.eventId],
    );
    // … and b3 was quarantined for a gap never filled.
    await p.query(
      `INSERT INTO "${schema}".inbox_quarantine (consumer, event_id, aggregate_type, aggregate_id, sequence,
         event_type, schema_version, headers, payload, reason, attempts)
       VALUES ($1, $2, 'order', 'b', 3, 'stock.reserved', 1, '{}', '\\x7b7d',
         'gap not filled after 50 deliveries: waiting for sequence 2 of this aggregate', 50)`,
      [consumer, b3.eventId],
    );

    expect((await migrate(p, { schema })).applied).toEqual(
      migrationSql()
        .map((m) => m.version)
        .filter((v) => v >= 4),
    );
    const inbox = createInbox({ pool: p, consumer, schema, maxAttempts: 5 });
    expect((await inbox.handle(a2, async () => undefined)).status).toBe('processed');
    // Its first handler failure is its first: not the 41st of 5.
    const failed = await inbox.handle(a3, async () => {
      throw new Error('downstream said no');
    });
    expect(failed).toMatchObject({ status: 'deferred', attempts: 1 });
    expect(await inbox.handle(b4, async () => undefined)).toEqual({
      status: 'quarantined',
      reason: `waiting behind quarantined event ${b3.eventId} (sequence 3)`,
    });
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
