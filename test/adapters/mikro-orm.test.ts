import { EntitySchema, MikroORM, type SqlEntityManager } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enqueue, transactions } from '../../src/adapters/mikro-orm.js';
import { OutboxValidationError } from '../../src/errors.js';
import { createInbox } from '../../src/inbox/inbox.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { type AdapterHarness, adapterConformance } from './conformance.js';
import { SERIALIZABLE } from './isolation.js';
import { runnerFaults } from './runner-faults.js';

interface Business {
  id: string;
  note?: string | null;
}

async function open(url: string, schema: string, connection: Record<string, unknown> = {}) {
  const BusinessEntity = new EntitySchema<Business>({
    name: 'Business',
    tableName: 'business',
    schema,
    properties: { id: { type: 'text', primary: true }, note: { type: 'text', nullable: true } },
  });
  const orm = await MikroORM.init({
    clientUrl: url,
    entities: [BusinessEntity],
    pool: { min: 0, max: 8 },
    driverOptions: { connection },
    debug: false,
  });
  return { orm, BusinessEntity };
}

const harness: AdapterHarness<SqlEntityManager> = {
  name: 'mikro-orm',
  enqueue,
  async open(url, schema) {
    const { orm, BusinessEntity } = await open(url, schema);
    return {
      transaction: (fn) => orm.em.fork().transactional(fn),
      async insertBusiness(em, id, note) {
        // A native insert: a second em.create() of one id would merge into the identity map, never
        // reaching the database's unique check the suite relies on. Persisted entities are below.
        await em.insert(BusinessEntity, { id, note: note ?? null });
      },
      nonTransactional: () => [orm.em, orm.em.fork(), orm],
      transactions: () => transactions(orm),
      close: () => orm.close(),
    };
  },
};

adapterConformance(harness, DATABASE_URL);

describe('mikro-orm runner faults', () => {
  let orm: MikroORM;
  beforeAll(async () => {
    ({ orm } = await open(DATABASE_URL, 'public'));
  });
  runnerFaults(() => ({ runner: transactions(orm), close: () => orm.close() }));
});

describe('mikro-orm adapter, beyond the suite', () => {
  let db: TestDb;
  let orm: MikroORM;
  let BusinessEntity: EntitySchema<Business>;
  const count = async (id: string) =>
    Number(
      (await db.pool.query(`SELECT count(*) AS n FROM "${db.schema}".business WHERE id = $1`, [id])).rows[0]
        .n,
    );

  beforeAll(async () => {
    db = await createTestDb('adapter_mikro_flush');
    await db.pool.query(`CREATE TABLE "${db.schema}".business (id text PRIMARY KEY, note text)`);
    ({ orm, BusinessEntity } = await open(DATABASE_URL, db.schema));
  });
  afterAll(async () => {
    await orm?.close();
    await db?.close();
  });

  it('refuses the EntityManager of a finished transactional() with OutboxValidationError on tx', async () => {
    let stale: SqlEntityManager | undefined;
    await orm.em.fork().transactional(async (em) => {
      stale = em as SqlEntityManager;
    });
    const event = { aggregateType: 'order', aggregateId: 'stale-em', type: 'order.placed', payload: {} };
    const refused = await enqueue(stale!, event, { schema: db.schema }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OutboxValidationError);
    expect((refused as OutboxValidationError).field).toBe('tx');
    expect((refused as Error).message).toMatch(/already committed or rolled back/);
    expect((refused as Error).message).toMatch(/em\.transactional/);
  });

  it('flushes the handler’s persisted entities inside the inbox transaction, with the dedup record', async () => {
    const inbox = createInbox({ transactions: transactions(orm.em), consumer: 'flush', schema: db.schema });
    const message = (eventId: string) => ({
      eventId,
      type: 'order.placed',
      aggregateType: 'order',
      aggregateId: eventId,
      sequence: 1,
      schemaVersion: 1,
      contentType: 'application/json',
      payload: Buffer.from('{}'),
      headers: {},
    });
    const kept = message(crypto.randomUUID());
    const result = await inbox.handle(kept, async (em) => {
      em.persist(em.create(BusinessEntity, { id: `kept-${kept.eventId}` })); // not flushed by the handler
    });
    expect(result.status).toBe('processed');
    expect(await count(`kept-${kept.eventId}`)).toBe(1);

    const failed = message(crypto.randomUUID());
    const outcome = await inbox.handle(failed, async (em) => {
      em.persist(em.create(BusinessEntity, { id: `failed-${failed.eventId}` }));
      throw new Error('handler says no');
    });
    expect(outcome.status).toBe('deferred');
    expect(await count(`failed-${failed.eventId}`)).toBe(0);
    expect(orm.em.getUnitOfWork(false).getIdentityMap().values()).toHaveLength(0);
  });

  it('writes a persisted entity and the events in one transaction', async () => {
    const id = `tx-${crypto.randomUUID()}`;
    await orm.em.fork().transactional(async (em) => {
      em.persist(em.create(BusinessEntity, { id }));
      await enqueue(
        em,
        { aggregateType: 'order', aggregateId: id, type: 'order.placed', payload: {} },
        { schema: db.schema },
      );
    });
    expect(await count(id)).toBe(1);
    const events = await db.pool.query(
      `SELECT count(*) AS n FROM "${db.schema}".events WHERE aggregate_id = $1`,
      [id],
    );
    expect(Number(events.rows[0].n)).toBe(1);
  });

  it('names the fix for an EntityManager outside a transaction', async () => {
    const error = await enqueue(orm.em.fork(), {
      aggregateType: 'order',
      aggregateId: '1',
      type: 'order.placed',
      payload: {},
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as Error).message).toMatch(/em\.transactional\(async \(em\)/);
  });

  it('runs the inbox’s transactions at READ COMMITTED, whatever the connection’s default', async () => {
    const serializable = await open(DATABASE_URL, db.schema, { options: SERIALIZABLE });
    try {
      const runner = transactions(serializable.orm);
      const level = await runner.transaction((_em, sql) =>
        sql.query<{ level: string }>({
          text: "SELECT current_setting('transaction_isolation') AS level",
          values: [],
        }),
      );
      expect(level.rows[0]?.level).toBe('read committed');
      const outside = await serializable.orm.em
        .fork()
        .transactional((em) =>
          em
            .getConnection()
            .execute<{ level: string }[]>("SELECT current_setting('transaction_isolation') AS level"),
        );
      expect(outside[0]?.level).toBe('serializable');
    } finally {
      await serializable.orm.close();
    }
  });
});
