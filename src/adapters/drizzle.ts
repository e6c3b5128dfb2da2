/**
 * tx-outbox for Drizzle ORM on PostgreSQL, with either of its drivers: node-postgres
 * (`drizzle-orm/node-postgres`) and postgres.js (`drizzle-orm/postgres-js`).
 *
 *   await db.transaction(async (tx) => {
 *     await tx.insert(orders).values(order);
 *     await enqueue(tx, { aggregateType: 'order', aggregateId: order.id, type: 'order.placed', payload: order });
 *   });
 *
 * Nothing here imports drizzle-orm: the handles are typed structurally, and the statements run on
 * the driver client Drizzle runs the transaction on (./drizzle-driver.ts), inside its BEGIN.
 */
import { OutboxValidationError } from '../errors.js';
import { enqueue as coreEnqueue, type EnqueueOptions, type EnqueueResult } from '../producer/enqueue.js';
import type { OutboxEvent } from '../producer/event.js';
import { type DriverClient, driverExecutor, sessionClient } from './drizzle-driver.js';
import {
  abortedTransaction,
  findErrorCode,
  notInTransaction,
  type SqlExecutor,
  type TransactionRunner,
} from './transactions.js';

export type { EnqueueOptions, EnqueueResult } from '../producer/enqueue.js';
export type { OutboxEvent } from '../producer/event.js';
export type { SqlExecutor, TransactionRunner } from './transactions.js';

/**
 * A Drizzle transaction (`PgTransaction`, the `tx` of `db.transaction(async (tx) => …)`, or of a
 * nested `tx.transaction(…)`): what tells it from the database at compile time is `rollback()`,
 * which only a transaction has.
 */
export interface DrizzleTransactionLike {
  rollback(): never;
}

/** `PgTransactionConfig`, as far as `transactions(db)` uses it. */
export interface DrizzleTransactionConfig {
  isolationLevel?: 'read uncommitted' | 'read committed' | 'repeatable read' | 'serializable';
}

/** A Drizzle database (`drizzle(pool)`, `drizzle(postgres(url))`): what opens transactions. */
export interface DrizzleDatabaseLike<Tx extends DrizzleTransactionLike> {
  transaction<T>(fn: (tx: Tx) => Promise<T>, config?: DrizzleTransactionConfig): Promise<T>;
}

const FIX = 'Call enqueue(tx, …) inside db.transaction(async (tx) => …) and pass its tx.';

/**
 * The executor on a Drizzle transaction's own connection; refuses the database, a postgres.js
 * client outside `begin`, and anything that is not a Drizzle handle.
 */
function transactionClient(tx: unknown): DriverClient {
  if (tx === null || typeof tx !== 'object') {
    throw new OutboxValidationError('tx', 'is not a Drizzle transaction', FIX);
  }
  const t = tx as { rollback?: unknown; transaction?: unknown };
  if (typeof t.rollback !== 'function') {
    if (typeof t.transaction === 'function') {
      throw notInTransaction('drizzle', 'is the database, not a transaction', FIX);
    }
    throw new OutboxValidationError('tx', 'is not a Drizzle transaction', FIX);
  }
  const found = sessionClient(tx);
  if (found === undefined) {
    throw new OutboxValidationError(
      'tx',
      'is a Drizzle transaction on a driver this adapter does not know (neither node-postgres nor postgres.js)',
      'Use drizzle-orm/node-postgres or drizzle-orm/postgres-js, or pass the driver client to tx-outbox’s own enqueue.',
    );
  }
  if (found.driver === 'postgres.js' && typeof found.client.savepoint !== 'function') {
    throw notInTransaction('drizzle', 'runs on a postgres.js client outside sql.begin', FIX);
  }
  return found;
}

/**
 * Writes events into the outbox inside the caller's Drizzle transaction: the same connection,
 * inside its BEGIN (or a nested transaction's savepoint), so they commit or roll back with the
 * business writes. Everything else is `enqueue` of `tx-outbox`: the same validation, statements
 * and options.
 */
export async function enqueue(
  tx: DrizzleTransactionLike,
  event: OutboxEvent,
  options?: EnqueueOptions,
): Promise<EnqueueResult>;
export async function enqueue(
  tx: DrizzleTransactionLike,
  events: readonly OutboxEvent[],
  options?: EnqueueOptions,
): Promise<EnqueueResult[]>;
export async function enqueue(
  tx: DrizzleTransactionLike,
  input: OutboxEvent | readonly OutboxEvent[],
  options?: EnqueueOptions,
): Promise<EnqueueResult | EnqueueResult[]> {
  const executor = driverExecutor(transactionClient(tx));
  return Array.isArray(input)
    ? coreEnqueue(executor, input as readonly OutboxEvent[], options)
    : coreEnqueue(executor, input as OutboxEvent, options);
}

/**
 * The runner the inbox opens its transactions with: `createInbox({ transactions: transactions(db) })`.
 * Each is `db.transaction(fn, { isolationLevel: 'read committed' })`; the handler gets Drizzle's
 * `tx`. Pass the database, not a transaction (a nested `tx.transaction` is a savepoint: it could
 * neither choose the isolation level nor commit).
 */
export function transactions<Tx extends DrizzleTransactionLike>(
  db: DrizzleDatabaseLike<Tx>,
): TransactionRunner<Tx> {
  if (db === null || typeof db !== 'object' || typeof db.transaction !== 'function') {
    throw new OutboxValidationError(
      'db',
      'is not a Drizzle database',
      'Pass what drizzle(…) returned (drizzle-orm/node-postgres or drizzle-orm/postgres-js).',
    );
  }
  if (typeof (db as { rollback?: unknown }).rollback === 'function') {
    throw new OutboxValidationError(
      'db',
      'is a Drizzle transaction',
      'Pass the database that drizzle(…) returned: the inbox opens a transaction of its own per message.',
    );
  }
  const found = sessionClient(db);
  if (found === undefined) {
    throw new OutboxValidationError(
      'db',
      'is a Drizzle database on a driver this adapter does not know (neither node-postgres nor postgres.js)',
      'Use drizzle-orm/node-postgres or drizzle-orm/postgres-js.',
    );
  }
  const sql = driverExecutor(found);
  return {
    name: 'drizzle',
    sql,
    transaction<T>(fn: (tx: Tx, sql: SqlExecutor) => Promise<T>): Promise<T> {
      return db.transaction(
        async (tx) => {
          const client = transactionClient(tx);
          const executor = driverExecutor(client);
          const result = await fn(tx, executor);
          await refuseAborted(client, executor);
          return result;
        },
        { isolationLevel: 'read committed' },
      );
    },
    errorCode,
  };
}

/**
 * Rejects with `abortedTransaction()` when a statement failed inside the transaction and `fn`
 * caught its error: Drizzle would send COMMIT, and PostgreSQL answer it with a silent ROLLBACK.
 * node-postgres knows the state without a round trip; on postgres.js one probe tells (25P02).
 */
async function refuseAborted(client: DriverClient, executor: SqlExecutor): Promise<void> {
  if (client.driver === 'node-postgres' && typeof client.client.getTransactionStatus === 'function') {
    if (client.client.getTransactionStatus() === 'E') throw abortedTransaction();
    return;
  }
  try {
    await executor.query({ text: 'SELECT 1', values: [] });
  } catch (error) {
    if (findErrorCode(error) === '25P02') throw abortedTransaction();
    throw error;
  }
}

/**
 * Lost-connection errors that carry no network code of their own: node-postgres' (by message),
 * postgres.js' (`CONNECTION_CLOSED` …), reported as the network code they stand for.
 */
const LOST_CONNECTION: ReadonlyArray<readonly [RegExp, string]> = [
  [/^CONNECTION_(CLOSED|ENDED|DESTROYED)$/, 'ECONNRESET'],
  [/^CONNECT_TIMEOUT$/, 'ETIMEDOUT'],
];
const NODE_PG_LOST =
  /^(Connection terminated|Client has encountered a connection error|Client was closed and is not queryable)/;

/**
 * The SQLSTATE or network code under an error Drizzle threw. drizzle-orm 0.45 wraps a driver's
 * error in `DrizzleQueryError` with the driver's error as `cause`; older versions threw it as it
 * was. Either way the walk finds it.
 */
function errorCode(error: unknown): string | undefined {
  const found = findErrorCode(error);
  if (found !== undefined) return found;
  for (let e: unknown = error, depth = 0; e !== null && typeof e === 'object' && depth < 6; depth++) {
    const { code, message } = e as { code?: unknown; message?: unknown };
    if (typeof code === 'string') {
      for (const [pattern, network] of LOST_CONNECTION) if (pattern.test(code)) return network;
    }
    if (typeof message === 'string' && NODE_PG_LOST.test(message)) return 'ECONNRESET';
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}
