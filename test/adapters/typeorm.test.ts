import { DataSource, type EntityManager, EntitySchema, type QueryRunner } from 'typeorm';
import { beforeAll, describe, expect, it } from 'vitest';
import { enqueue, transactions } from '../../src/adapters/typeorm.js';
import { OutboxValidationError } from '../../src/errors.js';
import { DATABASE_URL } from '../helpers/env.js';
import { type AdapterHarness, adapterConformance, type OrmUnderTest } from './conformance.js';
import { SERIALIZABLE } from './isolation.js';
import { runnerFaults } from './runner-faults.js';

interface Business {
  id: string;
  note: string | null;
}

function open(url: string, schema: string, extra: Record<string, unknown> = {}) {
  const BusinessEntity = new EntitySchema<Business>({
    name: 'Business',
    tableName: 'business',
    schema,
    columns: { id: { type: 'text', primary: true }, note: { type: 'text', nullable: true } },
  });
  const dataSource = new DataSource({
    type: 'postgres',
    url,
    entities: [BusinessEntity],
    synchronize: false,
    extra: { max: 8, ...extra },
  });
  return { dataSource, BusinessEntity };
}

const entityManagers: AdapterHarness<EntityManager> = {
  name: 'typeorm',
  enqueue,
  async open(url, schema): Promise<OrmUnderTest<EntityManager>> {
    const { dataSource, BusinessEntity } = open(url, schema);
    await dataSource.initialize();
    const released = dataSource.createQueryRunner();
    return {
      transaction: (fn) => dataSource.transaction(fn),
      async insertBusiness(em, id, note) {
        await em.getRepository(BusinessEntity).insert({ id, note: note ?? null });
      },
      nonTransactional: () => [
        dataSource.manager,
        dataSource,
        dataSource.createEntityManager(),
        released.manager,
      ],
      transactions: () => transactions(dataSource),
      async close() {
        await released.release();
        await dataSource.destroy();
      },
    };
  },
};

const queryRunners: AdapterHarness<QueryRunner> = {
  name: 'typeorm-qr',
  enqueue,
  async open(url, schema): Promise<OrmUnderTest<QueryRunner>> {
    const { dataSource, BusinessEntity } = open(url, schema);
    await dataSource.initialize();
    const idle = dataSource.createQueryRunner();
    await idle.connect();
    const finished = dataSource.createQueryRunner();
    await finished.startTransaction();
    await finished.commitTransaction();
    await finished.release();
    return {
      async transaction(fn) {
        const runner = dataSource.createQueryRunner();
        await runner.connect();
        await runner.startTransaction();
        try {
          const result = await fn(runner);
          await runner.commitTransaction();
          return result;
        } catch (error) {
          await runner.rollbackTransaction();
          throw error;
        } finally {
          await runner.release();
        }
      },
      async insertBusiness(runner, id, note) {
        await runner.manager
          .createQueryBuilder()
          .insert()
          .into(BusinessEntity)
          .values({ id, note: note ?? null })
          .execute();
      },
      nonTransactional: () => [idle, finished, idle.manager],
      transactions() {
        const runner = transactions(dataSource);
        return {
          name: runner.name,
          sql: runner.sql,
          errorCode: runner.errorCode,
          transaction: (fn) => runner.transaction((em, sql) => fn(em.queryRunner!, sql)),
        };
      },
      async close() {
        await idle.release();
        await dataSource.destroy();
      },
    };
  },
};

adapterConformance(entityManagers, DATABASE_URL);
adapterConformance(queryRunners, DATABASE_URL);

describe('typeorm runner faults', () => {
  const { dataSource } = open(DATABASE_URL, 'public');
  beforeAll(() => dataSource.initialize());
  runnerFaults(() => ({ runner: transactions(dataSource), close: () => dataSource.destroy() }));
});

describe('typeorm adapter, beyond the suite', () => {
  it('names the fix for the DataSource’s own manager', async () => {
    const { dataSource } = open(DATABASE_URL, 'public');
    await dataSource.initialize();
    try {
      const error = await enqueue(dataSource.manager, {
        aggregateType: 'order',
        aggregateId: '1',
        type: 'order.placed',
        payload: {},
      }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxValidationError);
      expect((error as Error).message).toMatch(/DataSource's own manager/);
      expect((error as Error).message).toMatch(/dataSource\.transaction\(async \(em\)/);
    } finally {
      await dataSource.destroy();
    }
  });

  it('returns the rows of an UPDATE … RETURNING through sql (not [rows, count])', async () => {
    const { dataSource } = open(DATABASE_URL, 'public');
    await dataSource.initialize();
    try {
      const runner = transactions(dataSource);
      const rows = await runner.transaction(async (_em, sql) => {
        await sql.query({ text: 'CREATE TEMP TABLE t (n int) ON COMMIT DROP', values: [] });
        await sql.query({ text: 'INSERT INTO t VALUES ($1), ($1 + 1)', values: [41] });
        return (await sql.query<{ n: number }>({ text: 'UPDATE t SET n = n + 1 RETURNING n', values: [] }))
          .rows;
      });
      expect(rows).toEqual([{ n: 42 }, { n: 43 }]);
      expect((await runner.sql.query({ text: 'SELECT $1::text AS s', values: ['x'] })).rows).toEqual([
        { s: 'x' },
      ]);
    } finally {
      await dataSource.destroy();
    }
  });

  it('runs the inbox’s transactions at READ COMMITTED, whatever the connection’s default', async () => {
    const { dataSource } = open(DATABASE_URL, 'public', { options: SERIALIZABLE });
    await dataSource.initialize();
    const level = "SELECT current_setting('transaction_isolation') AS level";
    try {
      const inside = await transactions(dataSource).transaction((_em, sql) =>
        sql.query({ text: level, values: [] }),
      );
      expect(inside.rows).toEqual([{ level: 'read committed' }]);
      expect(await dataSource.transaction((em) => em.query(level))).toEqual([{ level: 'serializable' }]);
    } finally {
      await dataSource.destroy();
    }
  });
});
