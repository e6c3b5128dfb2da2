/**
 * The Knex, TypeORM and MikroORM adapters' types, compiled by `npm run typecheck` (never run):
 * a transaction handle fits `enqueue`, a handle the types can tell is not one does not, and the
 * inbox's handler gets the ORM's own transaction type.
 */
import type { MikroORM, SqlEntityManager } from '@mikro-orm/postgresql';
import type { Knex } from 'knex';
import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import * as knexAdapter from '../../src/adapters/knex.js';
import * as mikroOrmAdapter from '../../src/adapters/mikro-orm.js';
import type { TransactionRunner } from '../../src/adapters/transactions.js';
import * as typeormAdapter from '../../src/adapters/typeorm.js';
import { createInbox, type InboxMessage } from '../../src/index.js';

const event = { aggregateType: 'order', aggregateId: '1', type: 'order.placed', payload: {} };

export async function knexTypes(knex: Knex) {
  await knex.transaction(async (trx) => {
    const one: { sequence: number } = await knexAdapter.enqueue(trx, event);
    const many: { sequence: number }[] = await knexAdapter.enqueue(trx, [event, event], { schema: 'outbox' });
    return [one, many];
  });
  // @ts-expect-error the Knex instance is not a transaction
  await knexAdapter.enqueue(knex, event);
  const runner: TransactionRunner<Knex.Transaction> = knexAdapter.transactions(knex);
  return runner;
}

export async function typeormTypes(dataSource: DataSource, queryRunner: QueryRunner) {
  await dataSource.transaction(async (em) => {
    await typeormAdapter.enqueue(em, event);
    await typeormAdapter.enqueue(em, [event]);
  });
  await typeormAdapter.enqueue(queryRunner, event);
  // @ts-expect-error the DataSource is not a transaction
  await typeormAdapter.enqueue(dataSource, event);
  const runner: TransactionRunner<EntityManager> = typeormAdapter.transactions(dataSource);
  return runner;
}

export async function mikroOrmTypes(orm: MikroORM) {
  await orm.em.fork().transactional(async (em) => {
    await mikroOrmAdapter.enqueue(em, event);
    await mikroOrmAdapter.enqueue(em, [event]);
  });
  // @ts-expect-error the MikroORM instance is not an EntityManager
  await mikroOrmAdapter.enqueue(orm, event);
  const runner: TransactionRunner<SqlEntityManager> = mikroOrmAdapter.transactions(orm);
  const fromEm: TransactionRunner<SqlEntityManager> = mikroOrmAdapter.transactions(orm.em);
  return [runner, fromEm];
}

/** The inbox's handler gets each ORM's own transaction type. */
export async function inboxHandlers(
  knex: Knex,
  dataSource: DataSource,
  orm: MikroORM,
  message: InboxMessage,
) {
  const viaKnex = createInbox({ transactions: knexAdapter.transactions(knex), consumer: 'k' });
  await viaKnex.handle(message, async (trx) => {
    const typed: Knex.Transaction = trx;
    await typed('business').insert({ id: message.eventId });
  });
  const viaTypeorm = createInbox({ transactions: typeormAdapter.transactions(dataSource), consumer: 't' });
  await viaTypeorm.handle(message, async (em) => {
    const typed: EntityManager = em;
    await typed.query('SELECT 1');
  });
  const viaMikroOrm = createInbox({ transactions: mikroOrmAdapter.transactions(orm), consumer: 'm' });
  await viaMikroOrm.handle(message, async (em) => {
    const typed: SqlEntityManager = em;
    await typed.flush();
    // @ts-expect-error the handler gets the ORM's transaction, not a pg client
    await em.query('SELECT 1');
  });
}
