/**
 * tx-outbox on Kysely with its PostgreSQL dialect (`tx-outbox/kysely`): `enqueue` on the `trx` of
 * `db.transaction().execute(async (trx) => …)`, and `transactions(db)` for
 * `createInbox({ transactions })`.
 *
 * Kysely is used through the handle it gives (structural types below): nothing here imports it.
 * Statements run as Kysely's own raw compiled queries, built here as the plain object
 * `CompiledQuery.raw(sql, parameters)` returns, on the handle without its plugins (a
 * CamelCasePlugin would rename the columns the core reads back). The dialect's driver binds the
 * parameters: node-postgres for `PostgresDialect`, which the core's statements are written for.
 */
import { OutboxValidationError } from '../errors.js';
import { handlerErrors } from './handler-guard.js';
import {
  type AdapterEnqueue,
  abortedTransaction,
  enqueueThrough,
  notInTransaction,
  type SqlExecutor,
  type TransactionRunner,
} from './transactions.js';

/** The shape of Kysely's `CompiledQuery` for raw SQL (`CompiledQuery.raw`). */
export interface KyselyRawQuery {
  readonly sql: string;
  readonly parameters: readonly unknown[];
  readonly query: {
    readonly kind: 'RawNode';
    readonly sqlFragments: readonly string[];
    readonly parameters: readonly never[];
  };
  readonly queryId: { readonly queryId: string };
}

/** What tx-outbox runs statements through: a `Kysely` instance or a `Transaction`. */
export interface KyselyQueryable {
  readonly isTransaction: boolean;
  executeQuery(query: KyselyRawQuery): Promise<{ readonly rows: readonly unknown[] }>;
  withoutPlugins(): KyselyQueryable;
}

/**
 * A Kysely `Transaction` (`isTransaction: true`), also a `ControlledTransaction`. A `Kysely`
 * instance has `isTransaction: boolean`, so passing one does not compile.
 */
export interface KyselyTransaction extends KyselyQueryable {
  readonly isTransaction: true;
}

/** The `new Kysely(…)` instance. */
export interface KyselyDatabase extends KyselyQueryable {
  transaction(): {
    setIsolationLevel(level: 'read committed'): {
      execute<T>(fn: (trx: KyselyTransaction) => Promise<T>): Promise<T>;
    };
  };
}

/** The transaction type of a Kysely instance: its `Transaction<DB>`. */
export type TransactionOf<K> = K extends {
  transaction(): {
    setIsolationLevel(level: 'read committed'): { execute(fn: (trx: infer Tx) => never): unknown };
  };
}
  ? Tx
  : KyselyTransaction;

/**
 * Writes events into the outbox on a Kysely transaction, in one round trip:
 *
 *   await db.transaction().execute(async (trx) => {
 *     await trx.insertInto('orders').values(order).execute();
 *     await enqueue(trx, { aggregateType: 'order', aggregateId: order.id, type: 'order.placed', payload });
 *   });
 *
 * Kysely's PostgreSQL dialect sends every statement unnamed: `options.prepared` changes nothing.
 */
export const enqueue: AdapterEnqueue<KyselyTransaction> = enqueueThrough((trx) =>
  executorOn(assertTransaction(trx)),
);

/**
 * The inbox's transactions through Kysely: `createInbox({ transactions: transactions(db) })`.
 * Handlers get the `trx` of `db.transaction().setIsolationLevel('read committed').execute(…)`.
 *
 * PostgreSQL answers COMMIT after a failed statement with a ROLLBACK and no error; Kysely 0.28
 * throws its AbortedTransactionError then, older versions report success. One `SELECT 1` after the
 * handler catches the case on every version, and the runner rejects with `abortedTransaction()`.
 * A lost connection is told from the handler's own network failure as for Knex (handler-guard.ts):
 * Kysely rejects with the ROLLBACK's error when the ROLLBACK failed.
 */
export function transactions<K extends KyselyDatabase>(
  db: K & (K extends { readonly isTransaction: true } ? never : unknown),
): TransactionRunner<TransactionOf<K>> {
  assertDatabase(db);
  // Kysely rejects with the ROLLBACK's error when it failed: what tells a lost connection.
  const errors = handlerErrors({ rollbackFailureRejects: true });
  return {
    name: 'kysely',
    sql: executorOn(db),
    errorCode: errors.errorCode,
    async transaction<T>(fn: (trx: TransactionOf<K>, sql: SqlExecutor) => Promise<T>): Promise<T> {
      try {
        return await errors.run((inside) =>
          db
            .transaction()
            .setIsolationLevel('read committed')
            .execute((trx) =>
              inside(async () => {
                const executor = executorOn(trx);
                const value = await fn(trx as unknown as TransactionOf<K>, executor).catch(
                  async (error: unknown) => {
                    await errors.screen(error, executor);
                    throw error;
                  },
                );
                await errors.probe(executor);
                return value;
              }),
            ),
        );
      } catch (error) {
        if ((error as { name?: unknown } | null)?.name === 'AbortedTransactionError')
          throw abortedTransaction();
        throw error;
      }
    },
  };
}

let queryIds = 0;

/** What `CompiledQuery.raw(sql, parameters)` builds, without Kysely at run time. */
function rawQuery(sql: string, parameters: readonly unknown[]): KyselyRawQuery {
  queryIds += 1;
  return Object.freeze({
    sql,
    parameters: Object.freeze([...parameters]),
    query: Object.freeze({ kind: 'RawNode' as const, sqlFragments: Object.freeze([sql]), parameters: [] }),
    queryId: Object.freeze({ queryId: `txo${queryIds.toString(36)}` }),
  });
}

function executorOn(handle: KyselyQueryable): SqlExecutor {
  const plain = handle.withoutPlugins();
  return {
    async query<R extends object = Record<string, unknown>>(query: {
      text: string;
      values: readonly unknown[];
      name?: string;
    }): Promise<{ rows: R[] }> {
      const { rows } = await plain.executeQuery(rawQuery(query.text, query.values));
      return { rows: rows as R[] };
    },
  };
}

function isQueryable(handle: unknown): handle is KyselyQueryable {
  const h = handle as Partial<Record<'executeQuery' | 'withoutPlugins' | 'isTransaction', unknown>> | null;
  return (
    typeof h === 'object' &&
    h !== null &&
    typeof h.executeQuery === 'function' &&
    typeof h.withoutPlugins === 'function' &&
    typeof h.isTransaction === 'boolean'
  );
}

function assertTransaction(trx: unknown): KyselyTransaction {
  const fix = 'Call enqueue(trx, …) inside db.transaction().execute(async (trx) => …), with that trx.';
  if (!isQueryable(trx)) throw new OutboxValidationError('tx', 'is not a Kysely transaction', fix);
  if (!trx.isTransaction) {
    throw notInTransaction('kysely', 'is a Kysely instance or connection, not a transaction', fix);
  }
  return trx as KyselyTransaction;
}

function assertDatabase(db: unknown): void {
  if (
    !isQueryable(db) ||
    db.isTransaction ||
    typeof (db as { transaction?: unknown }).transaction !== 'function'
  ) {
    throw new OutboxValidationError(
      'db',
      'is not a Kysely instance',
      'Pass the instance new Kysely({ dialect }) returned, not a transaction.',
    );
  }
}
