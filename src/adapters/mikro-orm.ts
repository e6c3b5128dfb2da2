/**
 * MikroORM (`tx-outbox/mikro-orm`, MikroORM 6 with its PostgreSQL driver): `enqueue(em, …)` on the
 * forked EntityManager of `em.transactional(async (em) => …)`, and `transactions(orm)` for
 * `createInbox({ transactions })`.
 *
 * Statements run on the transaction's Knex transaction (`em.getTransactionContext()`: MikroORM 6's
 * SQL drivers run on Knex) through `raw(sql, bindings)`, as in the Knex adapter. Not through
 * `em.execute(sql, params)`: it inlines the parameters into the text (`platform.formatQuery`), with
 * SQL-string escaping, where the core binds Buffers, Dates and arrays as parameters. MikroORM is
 * not imported: the types below are what the adapter needs of it.
 */
import { OutboxError, OutboxValidationError } from '../errors.js';
import { handlerErrors } from './handler-guard.js';
import { type KnexQueryableLike, knexExecutor } from './knex-executor.js';
import {
  type AdapterEnqueue,
  enqueueThrough,
  notInTransaction,
  type SqlExecutor,
  type TransactionRunner,
} from './transactions.js';

/** A MikroORM EntityManager: whether it is inside a transaction, and that transaction. */
export interface MikroOrmEntityManagerLike {
  isInTransaction(): boolean;
  getTransactionContext(): unknown;
  /** Writes the unit of work's changes (on the transaction, inside one). */
  flush(): Promise<void>;
}

/** An EntityManager the inbox forks and opens its transactions on (the MikroORM's `orm.em`). */
export interface MikroOrmRootLike<Em extends MikroOrmEntityManagerLike = MikroOrmEntityManagerLike> {
  /** The Knex instance of the SQL driver (autocommit statements run on its pool). */
  getKnex(): unknown;
  fork(): {
    /**
     * `isolationLevel` is MikroORM's `IsolationLevel`, a string enum that no string literal fits
     * in the types: `never` here, and its value `'read committed'` passed as such.
     */
    transactional<T>(cb: (em: Em) => Promise<T>, options: { readonly isolationLevel?: never }): Promise<T>;
  };
}

const ORM = 'mikro-orm';
const FIX = 'Call enqueue(em, …) inside em.transactional(async (em) => …), with that em.';
/** MikroORM's `IsolationLevel.READ_COMMITTED`, a string enum: no import of MikroORM needed. */
const READ_COMMITTED = 'read committed';

/** The Knex transaction of an EntityManager inside a transaction; an OutboxValidationError otherwise. */
function transactionOf(tx: unknown): KnexQueryableLike {
  const em = tx as Partial<MikroOrmEntityManagerLike> | null | undefined;
  if (em === null || typeof em !== 'object' || typeof em.isInTransaction !== 'function') {
    const what =
      typeof (em as { em?: unknown } | null)?.em === 'object'
        ? 'is the MikroORM instance, not a transaction'
        : 'is not a MikroORM EntityManager';
    throw notInTransaction(ORM, what, FIX);
  }
  if (!em.isInTransaction()) throw notInTransaction(ORM, 'is an EntityManager outside a transaction', FIX);
  const context = em.getTransactionContext?.() as Partial<KnexQueryableLike> | undefined;
  if ((typeof context !== 'function' && typeof context !== 'object') || typeof context?.raw !== 'function') {
    throw notInTransaction(
      ORM,
      "is an EntityManager whose transaction is not a Knex one (MikroORM 6's SQL drivers)",
      'Use MikroORM 6 with @mikro-orm/postgresql.',
    );
  }
  // MikroORM leaves isInTransaction() true on the fork after transactional() ends; its Knex
  // transaction knows it is done (as the Knex adapter checks).
  if ((context as { isCompleted?: () => boolean }).isCompleted?.() === true) {
    throw notInTransaction(
      ORM,
      'is an EntityManager whose transaction has already committed or rolled back',
      FIX,
    );
  }
  return context as KnexQueryableLike;
}

/**
 * Writes events into the outbox on a MikroORM transaction, in one round trip: the core `enqueue`
 * (see its options) on the transaction of `em`. Throws an OutboxValidationError (field `tx`) for
 * an EntityManager outside a transaction. Entities persisted but not yet flushed are written when
 * the transaction flushes, in the same transaction.
 */
export const enqueue: AdapterEnqueue<MikroOrmEntityManagerLike> = enqueueThrough(
  // Checked again before the statement is sent: enqueue awaits in between.
  (tx) => knexExecutor(transactionOf(tx), () => transactionOf(tx)),
);

/**
 * The inbox's transactions through MikroORM: a fresh fork of `orm.em` per message (nothing of one
 * message's identity map carries into the next, nor into `orm.em`), `transactional(fn, {
 * isolationLevel: 'read committed' })`; the handler gets the transaction's fork. Its unit of work
 * is flushed inside the transaction, before the commit: its entities and the dedup record commit
 * or roll back together. Pass the MikroORM instance or its `orm.em`.
 */
export function transactions<Em extends MikroOrmEntityManagerLike>(
  db: MikroOrmRootLike<Em> | { readonly em: MikroOrmRootLike<Em> },
): TransactionRunner<Em> {
  const root = (db !== null && typeof db === 'object' && 'em' in db ? db.em : db) as MikroOrmRootLike<Em>;
  if (
    root === null ||
    typeof root !== 'object' ||
    typeof root.fork !== 'function' ||
    typeof root.getKnex !== 'function'
  ) {
    throw new OutboxValidationError(
      'transactions',
      'is not a MikroORM instance or EntityManager of a SQL driver',
      'Pass transactions(orm) or transactions(orm.em).',
    );
  }
  const errors = handlerErrors({ rollbackFailureRejects: false });
  const errorCode = errors.errorCode;
  return {
    name: ORM,
    errorCode,
    sql: knexExecutor(root.getKnex() as KnexQueryableLike),
    transaction<T>(fn: (tx: Em, sql: SqlExecutor) => Promise<T>): Promise<T> {
      return errors.run((inside) =>
        root.fork().transactional(
          (em) =>
            inside(async () => {
              if (!em.isInTransaction()) {
                throw new OutboxError(
                  'MikroORM ran em.transactional() without a transaction (disableTransactions is set): ' +
                    'the inbox cannot commit the dedup record with the handler’s writes',
                  { code: 'TXO_NO_TRANSACTION' },
                );
              }
              const sql = knexExecutor(transactionOf(em));
              const result = await fn(em, sql).catch(async (error: unknown) => {
                await errors.screen(error, sql);
                throw error;
              });
              await errors.probe(sql);
              // A flush failing without a SQLSTATE is the database's when the transaction no longer
              // answers (screen), as for what the handler threw.
              await em.flush().catch(async (error: unknown) => {
                await errors.screen(error, sql);
                throw error;
              });
              return result;
            }),
          { isolationLevel: READ_COMMITTED as never },
        ),
      );
    },
  };
}
