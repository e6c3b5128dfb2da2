/**
 * The node-postgres adapter: what `createInbox({ pool })` runs on. The handler's transaction object
 * and the inbox's executor are the same PoolClient, checked out and ended by `inTransaction`.
 */
import type { Pool, PoolClient } from 'pg';
import { isPgServerError } from '../errors.js';
import { inTransaction, lostItsConnection } from '../producer/transaction.js';
import type { TransactionRunner } from './transactions.js';

/** SQLSTATEs of a connection that ended (class 08, shutdowns): an error of the database, not of a statement. */
const CONNECTION_ENDED = /^(08[0-9A-Z]{3}|57P0[123])$/;

/**
 * Transactions on `pool`: `BEGIN ISOLATION LEVEL READ COMMITTED`, `fn(client, client)`, COMMIT —
 * ROLLBACK when `fn` throws; a transaction `fn` left aborted rejects with TXO_TRANSACTION_ABORTED.
 *
 *   const inbox = createInbox({ transactions: pgTransactions(pool), consumer: 'inventory' });
 *   // the same as createInbox({ pool, consumer: 'inventory' })
 */
export function pgTransactions(pool: Pool): TransactionRunner<PoolClient> {
  return {
    name: 'pg',
    // The ordering decision reads the position row it just locked: READ COMMITTED sees the latest
    // committed version (a stricter default isolation would fail instead of waiting).
    transaction: (fn) =>
      inTransaction(pool, (client) => fn(client, client), 'BEGIN ISOLATION LEVEL READ COMMITTED'),
    sql: pool,
    errorCode: pgErrorCode,
  };
}

/**
 * The SQLSTATE of an error the PostgreSQL server sent (pg's DatabaseError); for an error that
 * `inTransaction` threw after losing its connection (its ROLLBACK could not run either), a
 * connection SQLSTATE — the one the server sent if it did, else 08006 (connection_failure).
 * Undefined otherwise: a Node network code is reported only when the database's own connection
 * was lost, so a handler's call to another service that is down (ECONNREFUSED) stays the
 * handler's failure.
 */
export function pgErrorCode(error: unknown): string | undefined {
  const code = isPgServerError(error) ? error.code : undefined;
  if (lostItsConnection(error)) return code !== undefined && CONNECTION_ENDED.test(code) ? code : '08006';
  return code;
}
