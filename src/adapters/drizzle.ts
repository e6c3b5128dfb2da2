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
import { isUnreachableCode } from '../network-errors.js';
import { type DriverClient, driverExecutor, sessionClient } from './drizzle-driver.js';
import { type ConnectionState, guarded, guardedBegin } from './postgres-js-guard.js';
import {
  type AdapterEnqueue,
  abortedTransaction,
  enqueueThrough,
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
export const enqueue: AdapterEnqueue<DrizzleTransactionLike> = enqueueThrough((tx) =>
  driverExecutor(transactionClient(tx)),
);

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
  const config = { isolationLevel: 'read committed' } as const;
  const body = async <T>(tx: Tx, fn: (tx: Tx, sql: SqlExecutor) => Promise<T>): Promise<T> => {
    const client = transactionClient(tx);
    const executor = driverExecutor(client);
    const result = await fn(tx, executor);
    await refuseAborted(client, executor);
    return result;
  };
  return {
    name: 'drizzle',
    sql,
    transaction<T>(fn: (tx: Tx, sql: SqlExecutor) => Promise<T>): Promise<T> {
      if (found.driver === 'postgres.js') {
        // Drizzle's db.transaction is sql.begin: the postgres.js adapter's guard, on the client
        // Drizzle's session sends through (the handler's statements, and the runner's).
        return guardedBegin<Tx, T>(
          (callback) => db.transaction(callback, config),
          (tx, state) => {
            guardSession(tx, state);
            return body(tx, fn);
          },
        );
      }
      // pg-pool drops its idle 'error' listener at checkout, and Drizzle adds none: a backend that
      // dies while the handler awaits something else would emit 'error' on a client nobody listens
      // to, and end the process. The loss still fails the transaction's next statement (08006).
      let detach: (() => void) | undefined;
      return db
        .transaction((tx) => {
          detach = listenForErrors(tx);
          return body(tx, fn);
        }, config)
        .finally(() => detach?.());
    },
    errorCode,
  };
}

const ignore = (): void => undefined;

/** Adds a no-op 'error' listener to a node-postgres transaction's client; returns its removal. */
function listenForErrors(tx: object): (() => void) | undefined {
  const found = sessionClient(tx);
  const client = found?.driver === 'node-postgres' ? found.client : undefined;
  if (typeof client?.on !== 'function' || typeof client.removeListener !== 'function') return undefined;
  client.on('error', ignore);
  return () => client.removeListener?.('error', ignore);
}

/**
 * Puts the postgres.js guard (postgres-js-guard.ts) on the client of a Drizzle transaction's
 * session, the one every statement of `tx` goes through (read in drizzle-orm 0.45's
 * PostgresJsSession; a nested `tx.transaction` takes its client from the guarded one).
 */
function guardSession(tx: object, state: ConnectionState): void {
  const h = tx as { session?: { client?: unknown }; _?: { session?: { client?: unknown } } };
  const session = h.session ?? h._?.session;
  if (session !== undefined && typeof session.client === 'function') {
    session.client = guarded(session.client as object, state);
  }
}

/**
 * Rejects with `abortedTransaction()` when a statement failed inside the transaction and `fn`
 * caught its error: Drizzle would send COMMIT, and PostgreSQL answer it with a silent ROLLBACK
 * (Drizzle does not return the COMMIT's command tag, which would tell). One probe tells (25P02);
 * node-postgres' transaction status can say so sooner, but not reliably later: a failed query
 * rejects before the server's ReadyForQuery updates it.
 */
async function refuseAborted(client: DriverClient, executor: SqlExecutor): Promise<void> {
  if (client.driver === 'node-postgres' && client.client.getTransactionStatus?.() === 'E') {
    throw abortedTransaction();
  }
  try {
    await executor.query({ text: 'SELECT 1', values: [] });
  } catch (error) {
    if (findErrorCode(error) === '25P02') throw abortedTransaction();
    throw error;
  }
}

const SQLSTATE = /^[0-9A-Z]{5}$/;
/** postgres.js' own codes for a connection that closed under a query, or could not open. */
const POSTGRES_JS_LOST = /^(CONNECTION_(CLOSED|ENDED|DESTROYED)|CONNECT_TIMEOUT)$/;
/** node-postgres' errors of a lost connection, which carry no code. */
const NODE_PG_LOST =
  /^(Connection terminated|Client has encountered a connection error|Client was closed and is not queryable)/;

/**
 * The SQLSTATE of a server error under an error Drizzle threw (drizzle-orm 0.45 wraps the driver's
 * error in `DrizzleQueryError`, as `cause`; older versions threw it as it was), or for a lost
 * connection `08006` (connection_failure) — or the network code, when it is under a Drizzle query's
 * error. A network code elsewhere (the handler's call to another service) is not the database's:
 * undefined, as for any other error.
 */
function errorCode(error: unknown): string | undefined {
  let underQuery = false;
  for (let e: unknown = error, depth = 0; e !== null && typeof e === 'object' && depth < 8; depth++) {
    const { code, severity, message, query, params } = e as Record<string, unknown>;
    if (typeof code === 'string') {
      if (SQLSTATE.test(code) && typeof severity === 'string') return code;
      if (POSTGRES_JS_LOST.test(code)) return '08006';
      if (underQuery && isUnreachableCode(code)) return code;
    }
    if (typeof message === 'string' && NODE_PG_LOST.test(message)) return '08006';
    // DrizzleQueryError, structurally: the failed query's text and parameters.
    if (typeof query === 'string' && Array.isArray(params)) underQuery = true;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}
