/**
 * The core `enqueue` (node-postgres) refuses the handles of the ORMs and drivers tx-outbox has an
 * adapter for, naming the subpath whose `enqueue` takes them — the real objects of each library,
 * databases and transactions alike. TypeORM's EntityManager and QueryRunner have a `query` method
 * of their own: it must not be called (on the root manager it would run outside any transaction).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MikroORM } from '@mikro-orm/postgresql';
import { PrismaPg } from '@prisma/adapter-pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import knex from 'knex';
import { Kysely, PostgresDialect } from 'kysely';
import postgres from 'postgres';
import { DataSource } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { enqueue } from '../../src/producer/enqueue.js';
import { createTestDb, inTransaction, type TestDb } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';

let db: TestDb;
const event = { aggregateType: 'order', aggregateId: 'orm', type: 'order.placed', payload: {} };

/** What the core enqueue rejected `handle` with. */
async function refusal(handle: unknown): Promise<OutboxValidationError> {
  const error = await enqueue(handle as never, event, { schema: db.schema }).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(OutboxValidationError);
  return error as OutboxValidationError;
}

async function expectRefused(handle: unknown, what: RegExp, subpath: string): Promise<void> {
  const error = await refusal(handle);
  expect(error.field).toBe('tx');
  expect(error.message).toMatch(what);
  expect(error.message).toContain(
    `import { enqueue } from 'tx-outbox/${subpath}'`.replace('import', 'Import'),
  );
}

/** A generated Prisma client (Prisma needs one per schema): generated here, into .tmp, without network. */
async function prismaClientClass(): Promise<new (options: { adapter: unknown }) => PrismaLike> {
  const dir = join(process.cwd(), '.tmp', 'enqueue-orm-handles-prisma');
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'schema.prisma'),
    `generator client {\n  provider = "prisma-client"\n  output = "./client"\n}\n` +
      `datasource db {\n  provider = "postgresql"\n}\n` +
      `model business {\n  id String @id\n}\n`,
  );
  execFileSync(
    join(process.cwd(), 'node_modules', '.bin', 'prisma'),
    ['generate', '--schema', join(dir, 'schema.prisma')],
    {
      env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: '/bin/true', CHECKPOINT_DISABLE: '1' },
      stdio: 'pipe',
    },
  );
  const module = (await import(join(dir, 'client', 'client.ts'))) as {
    PrismaClient: new (options: { adapter: unknown }) => PrismaLike;
  };
  return module.PrismaClient;
}
interface PrismaLike {
  $transaction<T>(fn: (tx: unknown) => Promise<T>): Promise<T>;
  $disconnect(): Promise<void>;
}

beforeAll(async () => {
  db = await createTestDb('enqueue_orm_handles');
});
afterAll(async () => {
  // Nothing any of them did wrote an event.
  if (db)
    expect(Number((await db.pool.query(`SELECT count(*) AS n FROM "${db.schema}".events`)).rows[0].n)).toBe(
      0,
    );
  await db?.close();
});

describe('the core enqueue refuses ORM handles, naming the subpath', () => {
  it('Drizzle: the database and a transaction', async () => {
    const d = drizzle(db.pool);
    await expectRefused(d, /^tx: is a Drizzle database \(not a transaction\)/, 'drizzle');
    await d.transaction(async (tx) => {
      await expectRefused(tx, /^tx: is a Drizzle transaction, which the core enqueue/, 'drizzle');
    });
  });

  it('Kysely: the database and a transaction', async () => {
    const k = new Kysely<object>({ dialect: new PostgresDialect({ pool: db.pool }) });
    await expectRefused(k, /is a Kysely database \(not a transaction\)/, 'kysely');
    await k.transaction().execute(async (trx) => {
      await expectRefused(trx, /is a Kysely transaction/, 'kysely');
    });
  });

  it('Knex: the instance and a transaction', async () => {
    const kn = knex({ client: 'pg', connection: DATABASE_URL, pool: { min: 0, max: 2 } });
    try {
      await expectRefused(kn, /is a Knex instance \(not a transaction\)/, 'knex');
      await kn.transaction(async (trx) => {
        await expectRefused(trx, /is a Knex transaction/, 'knex');
      });
    } finally {
      await kn.destroy();
    }
  });

  it('postgres.js: sql and a transaction', async () => {
    const sql = postgres(DATABASE_URL, { max: 2, onnotice: () => undefined });
    try {
      await expectRefused(sql, /is a postgres\.js sql \(not a transaction\)/, 'postgres-js');
      await sql.begin(async (tx) => {
        await expectRefused(tx, /is a postgres\.js transaction/, 'postgres-js');
      });
    } finally {
      await sql.end();
    }
  });

  it('TypeORM: an EntityManager (root and in a transaction) and a QueryRunner, whose query is never called', async () => {
    const ds = new DataSource({ type: 'postgres', url: DATABASE_URL, poolSize: 2 });
    await ds.initialize();
    try {
      // A spy on `query`, counting only while enqueue looks at the handle.
      let calls = 0;
      const refusedUnqueried = async (o: { query: (...a: never[]) => unknown }, what: RegExp) => {
        const query = o.query;
        o.query = (...a: never[]) => {
          calls += 1;
          return query.apply(o, a);
        };
        try {
          await expectRefused(o, what, 'typeorm');
        } finally {
          o.query = query;
        }
      };
      await refusedUnqueried(ds.manager, /is a TypeORM EntityManager/);
      await ds.transaction(async (manager) => {
        await refusedUnqueried(manager, /is a TypeORM EntityManager/);
      });
      const runner = ds.createQueryRunner();
      try {
        await runner.startTransaction();
        await refusedUnqueried(runner, /is a TypeORM QueryRunner/);
        await runner.rollbackTransaction();
      } finally {
        await runner.release();
      }
      expect(calls).toBe(0);
    } finally {
      await ds.destroy();
    }
  });

  it('MikroORM: the EntityManager (forked and in a transaction) and the MikroORM instance', async () => {
    const orm = await MikroORM.init({
      clientUrl: DATABASE_URL,
      entities: [],
      discovery: { warnWhenNoEntities: false },
      pool: { min: 0, max: 2 },
    });
    try {
      await expectRefused(orm.em.fork(), /is a MikroORM EntityManager/, 'mikro-orm');
      await orm.em.fork().transactional(async (em) => {
        await expectRefused(em, /is a MikroORM EntityManager/, 'mikro-orm');
      });
      await expectRefused(orm, /is a MikroORM instance \(not a transaction\)/, 'mikro-orm');
    } finally {
      await orm.close();
    }
  });

  it('Prisma: the client and an interactive transaction', async () => {
    const PrismaClient = await prismaClientClass();
    const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: DATABASE_URL, max: 2 }) });
    try {
      await expectRefused(prisma, /is a PrismaClient \(not a transaction\)/, 'prisma');
      await prisma.$transaction(async (tx) => {
        await expectRefused(tx, /is a Prisma transaction client/, 'prisma');
      });
    } finally {
      await prisma.$disconnect();
    }
  }, 60_000);

  it('a pg PoolClient in a transaction is still taken, and a Pool still refused as before', async () => {
    await inTransaction(db.pool, async (tx) => {
      const before = await enqueue(tx, event, { schema: db.schema });
      expect(before.sequence).toBe(1);
      throw new Error('roll back');
    }).catch((e: unknown) => expect((e as Error).message).toBe('roll back'));
    expect((await refusal(db.pool)).message).toMatch(/^tx: is a Pool/);
    expect((await refusal({})).message).toMatch(/^tx: is not a database handle/);
  });
});
