/**
 * Knex (`tx-outbox/knex`): `enqueue(trx, …)` on the `trx` of `knex.transaction(async (trx) => …)`,
 * and `transactions(knex)` for `createInbox({ transactions })`.
 *
 * Statements go through `trx.raw(sql, bindings)` (./knex-executor.ts), with the `$n` parameters
 * rewritten for Knex (./knex-bindings.ts). Knex is not imported: the types below are what the
 * adapter needs of it, and a Knex instance or transaction fits them.
 */
import { OutboxValidationError } from '../errors.js';
import { handlerErrors } from './handler-guard.js';
import { type KnexQueryableLike, knexExecutor } from './knex-executor.js';
import {
  type AdapterEnqueue,
  enqueueThrough,
  notInTransaction,
  type SqlExecutor,
  type TransactionRunner,
} from './transactions.js';

export type { KnexQueryableLike, KnexRawLike } from './knex-executor.js';

/** A Knex transaction (`trx`): a Knex instance has no `isCompleted`, so it does not fit. */
export interface KnexTransactionLike extends KnexQueryableLike {
  isCompleted(): boolean;
}

/** A Knex instance, whose `transaction(scope, config)` the inbox opens its transactions with. */
export interface KnexLike<Trx extends KnexTransactionLike = KnexTransactionLike> extends KnexQueryableLike {
  transaction<T>(scope: (trx: Trx) => Promise<T>, config: { isolationLevel: 'read committed' }): Promise<T>;
}

const ORM = 'knex';
const FIX = 'Call enqueue(trx, …) inside knex.transaction(async (trx) => …), with that trx.';

function assertKnexTransaction(tx: unknown): asserts tx is KnexTransactionLike {
  const handle = tx as Partial<KnexTransactionLike> | null | undefined;
  if (
    (typeof handle !== 'function' && (typeof handle !== 'object' || handle === null)) ||
    typeof handle.raw !== 'function'
  ) {
    throw notInTransaction(ORM, 'is not a Knex handle', FIX);
  }
  if (handle.isTransaction !== true || typeof handle.isCompleted !== 'function') {
    throw notInTransaction(ORM, 'is the Knex instance, not a transaction', FIX);
  }
  if (handle.isCompleted()) {
    throw notInTransaction(ORM, 'is a transaction that has already committed or rolled back', FIX);
  }
}

/**
 * Writes events into the outbox on a Knex transaction, in one round trip: the core `enqueue`
 * (see its options) on `trx`. Throws an OutboxValidationError (field `tx`) for a Knex instance
 * or a finished transaction.
 */
export const enqueue: AdapterEnqueue<KnexTransactionLike> = enqueueThrough((tx) => {
  assertKnexTransaction(tx);
  // Checked again before the statement is sent: enqueue awaits in between.
  return knexExecutor(tx, () => assertKnexTransaction(tx));
});

/**
 * The inbox's transactions through Knex: `knex.transaction(fn, { isolationLevel: 'read
 * committed' })`; the handler gets the `trx`. Pass the Knex instance, not a transaction (the
 * inbox's work would become a savepoint of it).
 */
export function transactions<Trx extends KnexTransactionLike>(db: KnexLike<Trx>): TransactionRunner<Trx> {
  const handle = db as Partial<KnexLike<Trx>> | null | undefined;
  if (
    (typeof handle !== 'function' && (typeof handle !== 'object' || handle === null)) ||
    typeof handle.transaction !== 'function' ||
    typeof handle.raw !== 'function'
  ) {
    throw new OutboxValidationError('transactions', 'is not a Knex instance', 'Pass transactions(knex).');
  }
  if (handle.isTransaction === true) {
    throw new OutboxValidationError(
      'transactions',
      'is given a Knex transaction, so the inbox would run in savepoints of it',
      'Pass transactions(knex) with the Knex instance.',
    );
  }
  const errors = handlerErrors({ rollbackFailureRejects: true });
  const errorCode = errors.errorCode;
  return {
    name: ORM,
    sql: knexExecutor(db),
    errorCode,
    transaction<T>(fn: (tx: Trx, sql: SqlExecutor) => Promise<T>): Promise<T> {
      return errors.run((inside) =>
        db.transaction(
          (trx) =>
            inside(async () => {
              const sql = knexExecutor(trx);
              const result = await fn(trx, sql).catch(async (error: unknown) => {
                await errors.screen(error, sql);
                throw error;
              });
              await errors.probe(sql);
              return result;
            }),
          { isolationLevel: 'read committed' },
        ),
      );
    },
  };
}
