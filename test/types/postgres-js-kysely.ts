/**
 * What the types of `tx-outbox/postgres-js` and `tx-outbox/kysely` refuse: the root handle where
 * a transaction is needed. Never run, only compiled (`npm run typecheck`).
 */
import { type Kysely, sql as kyselySql, type Transaction } from 'kysely';
import type postgres from 'postgres';
import * as kysely from '../../src/adapters/kysely.js';
import * as postgresJs from '../../src/adapters/postgres-js.js';

const event = { aggregateType: 'order', aggregateId: '1', type: 'order.placed', payload: {} };

export async function postgresJsTypes(
  sql: postgres.Sql,
  reserved: postgres.ReservedSql,
  tx: postgres.TransactionSql,
): Promise<void> {
  const one: { eventId: string; sequence: number } = await postgresJs.enqueue(tx, event);
  const many: { eventId: string; sequence: number }[] = await postgresJs.enqueue(tx, [event]);
  void [one, many];
  // @ts-expect-error the root sql is not a transaction
  void postgresJs.enqueue(sql, event);
  // @ts-expect-error a reserved connection is not a transaction
  void postgresJs.enqueue(reserved, event);
  // The handler gets postgres.js's own TransactionSql.
  const runner = postgresJs.transactions(sql);
  await runner.transaction(async (t) => {
    const rows = await t<{ n: number }[]>`SELECT 1 AS n`;
    const n: number | undefined = rows[0]?.n;
    await t.savepoint(async (s) => s`SELECT ${n ?? 0}`);
  });
}

interface Db {
  business: { id: string; note: string | null };
}

export async function kyselyTypes(db: Kysely<Db>, trx: Transaction<Db>): Promise<void> {
  const one: { eventId: string; sequence: number } = await kysely.enqueue(trx, event);
  const many: { eventId: string; sequence: number }[] = await kysely.enqueue(trx, [event]);
  void [one, many];
  // @ts-expect-error a Kysely instance is not a transaction
  void kysely.enqueue(db, event);
  // The handler gets Kysely's own Transaction<Db>.
  const runner = kysely.transactions(db);
  await runner.transaction(async (t) => {
    await t.insertInto('business').values({ id: 'x', note: null }).execute();
    await kyselySql`SELECT 1`.execute(t);
    // @ts-expect-error no such table
    await t.insertInto('nothing').values({}).execute();
  });
  // @ts-expect-error a transaction cannot open the inbox's transactions
  kysely.transactions(trx);
}
