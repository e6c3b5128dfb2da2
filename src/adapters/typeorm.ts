/**
 * TypeORM (`tx-outbox/typeorm`, PostgreSQL driver): `enqueue(em, …)` on the EntityManager of
 * `dataSource.transaction(async (em) => …)`, or on a QueryRunner after `startTransaction()`; and
 * `transactions(dataSource)` for `createInbox({ transactions })`.
 *
 * Statements go through the transaction's QueryRunner: `query(text, values, true)` takes `$n` as
 * is and, structured, returns the rows of every statement (unstructured, an UPDATE's come back as
 * `[rows, count]`). TypeORM sends no named statements, so the core's prepared names are dropped.
 * TypeORM is not imported: the types below are what the adapter needs of it.
 */
import { OutboxValidationError } from '../errors.js';
import { sendInTransaction } from '../producer/executor.js';
import { handlerErrors } from './handler-guard.js';
import {
  type AdapterEnqueue,
  enqueueThrough,
  notInTransaction,
  type SqlExecutor,
  type TransactionRunner,
} from './transactions.js';

/** A TypeORM QueryRunner: one connection, and the transaction on it, if started. */
export interface TypeOrmQueryRunnerLike {
  readonly isTransactionActive: boolean;
  readonly isReleased: boolean;
  query(
    query: string,
    parameters: unknown[] | undefined,
    useStructuredResult: true,
  ): Promise<{ records?: unknown[] }>;
}

/**
 * A TypeORM EntityManager: the one `dataSource.transaction()` passes has the transaction's
 * QueryRunner; the DataSource's own `manager` has none. (A DataSource does not fit: it saves no
 * entities itself.)
 */
export interface TypeOrmEntityManagerLike {
  readonly queryRunner?: TypeOrmQueryRunnerLike | undefined;
  save(...args: never[]): unknown;
}

/** What the inbox uses of a DataSource: its transactions, and a QueryRunner for autocommit. */
export interface TypeOrmDataSourceLike<Em extends TypeOrmEntityManagerLike = TypeOrmEntityManagerLike> {
  transaction<T>(isolationLevel: 'READ COMMITTED', runInTransaction: (em: Em) => Promise<T>): Promise<T>;
  createQueryRunner(): TypeOrmQueryRunnerLike & { release(): Promise<void> };
}

const ORM = 'typeorm';
const FIX =
  'Call enqueue(em, …) inside dataSource.transaction(async (em) => …) with that em, or pass a ' +
  'QueryRunner after queryRunner.startTransaction().';

/**
 * enqueue's executor on `tx`, checked again right before each statement is sent (enqueue awaits
 * between its first check and the send). The QueryRunner's `isTransactionActive` turns false only
 * once its ROLLBACK has finished, so a statement queued behind that ROLLBACK on node-postgres
 * would pass it and run in autocommit: on node-postgres the statement goes to the runner's own
 * client (`databaseConnection`), checked where pg sends it (sendInTransaction). TypeORM's query
 * logging does not see it.
 */
function enqueueExecutor(tx: TypeOrmEntityManagerLike | TypeOrmQueryRunnerLike): SqlExecutor {
  return {
    async query<R extends object>(query: { text: string; values: readonly unknown[] }) {
      const runner = transactionRunnerOf(tx);
      const client = (runner as { databaseConnection?: unknown }).databaseConnection as
        | (SqlExecutor & { getTransactionStatus?: unknown })
        | undefined;
      if (typeof client?.getTransactionStatus === 'function' && typeof client.query === 'function') {
        return sendInTransaction<R>(client, { text: query.text, values: [...query.values] });
      }
      return runnerExecutor(runner).query<R>(query);
    },
  };
}

function runnerExecutor(runner: TypeOrmQueryRunnerLike): SqlExecutor {
  return {
    async query<R extends object>(query: { text: string; values: readonly unknown[] }) {
      const result = await runner.query(query.text, [...query.values], true);
      return { rows: (result.records ?? []) as R[] };
    },
  };
}

function isQueryRunner(handle: object): handle is TypeOrmQueryRunnerLike {
  return (
    typeof (handle as Partial<TypeOrmQueryRunnerLike>).isTransactionActive === 'boolean' &&
    typeof (handle as Partial<TypeOrmQueryRunnerLike>).query === 'function'
  );
}

/** The QueryRunner of a handle inside an active transaction; an OutboxValidationError otherwise. */
function transactionRunnerOf(tx: unknown): TypeOrmQueryRunnerLike {
  if (tx === null || typeof tx !== 'object') throw notInTransaction(ORM, 'is not a TypeORM handle', FIX);
  if (isQueryRunner(tx)) {
    if (tx.isReleased) throw notInTransaction(ORM, 'is a released QueryRunner', FIX);
    if (!tx.isTransactionActive) {
      throw notInTransaction(ORM, 'is a QueryRunner without an active transaction', FIX);
    }
    return tx;
  }
  const handle = tx as Partial<TypeOrmEntityManagerLike> & { createQueryRunner?: unknown };
  if (typeof handle.save !== 'function') {
    const what =
      typeof handle.createQueryRunner === 'function'
        ? 'is the DataSource, not a transaction'
        : 'is not a TypeORM handle';
    throw notInTransaction(ORM, what, FIX);
  }
  const runner = handle.queryRunner;
  if (runner === undefined || runner === null || !isQueryRunner(runner)) {
    throw notInTransaction(
      ORM,
      "is an EntityManager without a transaction (the DataSource's own manager)",
      FIX,
    );
  }
  if (runner.isReleased || !runner.isTransactionActive) {
    throw notInTransaction(ORM, 'is an EntityManager whose QueryRunner has no active transaction', FIX);
  }
  return runner;
}

/**
 * Writes events into the outbox on a TypeORM transaction, in one round trip: the core `enqueue`
 * (see its options) on the transaction's QueryRunner. Throws an OutboxValidationError (field
 * `tx`) for an EntityManager or QueryRunner without an active transaction.
 */
export const enqueue: AdapterEnqueue<TypeOrmEntityManagerLike | TypeOrmQueryRunnerLike> = enqueueThrough(
  (tx) => {
    transactionRunnerOf(tx);
    return enqueueExecutor(tx);
  },
);

/**
 * The inbox's transactions through TypeORM: `dataSource.transaction('READ COMMITTED', fn)`; the
 * handler gets the transaction's EntityManager.
 */
export function transactions<Em extends TypeOrmEntityManagerLike>(
  dataSource: TypeOrmDataSourceLike<Em>,
): TransactionRunner<Em> {
  if (
    dataSource === null ||
    typeof dataSource !== 'object' ||
    typeof dataSource.transaction !== 'function' ||
    typeof dataSource.createQueryRunner !== 'function'
  ) {
    throw new OutboxValidationError(
      'transactions',
      'is not a TypeORM DataSource',
      'Pass transactions(dataSource).',
    );
  }
  const errors = handlerErrors({ rollbackFailureRejects: false });
  const errorCode = errors.errorCode;
  return {
    name: ORM,
    errorCode,
    sql: {
      async query<R extends object>(query: { text: string; values: readonly unknown[] }) {
        const runner = dataSource.createQueryRunner();
        try {
          return await runnerExecutor(runner).query<R>(query);
        } finally {
          await runner.release();
        }
      },
    },
    transaction<T>(fn: (tx: Em, sql: SqlExecutor) => Promise<T>): Promise<T> {
      return errors.run((inside) =>
        dataSource.transaction('READ COMMITTED', (em) =>
          inside(async () => {
            const sql = runnerExecutor(transactionRunnerOf(em));
            const result = await fn(em, sql).catch(async (error: unknown) => {
              await errors.screen(error, sql);
              throw error;
            });
            await errors.probe(sql);
            return result;
          }),
        ),
      );
    },
  };
}
