/**
 * What an ORM's TransactionRunner does around the inbox's handler, the same for each ORM: find a
 * transaction the handler left aborted, and tell a lost connection and the handler's own network
 * failures apart (the pg runner knows from its client; an ORM's errors do not say).
 */
import { abortedTransaction, findErrorCode, type SqlExecutor } from './transactions.js';

const SQLSTATE = /^[0-9A-Z]{5}$/;

/** SQLSTATEs of a connection that ended (class 08, shutdowns), as the pg runner reports them. */
const CONNECTION_ENDED = /^(08[0-9A-Z]{3}|57P0[123])$/;

/** A runner's `errorCode`, and what feeds it around the ORM's transaction. */
export interface HandlerErrors {
  /**
   * The SQLSTATE or network code under `error` (findErrorCode), with what the ORM's errors do not
   * say: an error thrown when the transaction's connection was lost is a connection fault
   * (`08006` unless it says which); no network code under an error the handler threw while its
   * transaction's connection was fine (a call of its own to a service that is down, charged to
   * the handler, not a lost database).
   */
  errorCode(error: unknown): string | undefined;
  /**
   * Runs the ORM's transaction, `open(inside)`: the ORM calls `inside(work)` within it. When the
   * work threw and the ORM's ROLLBACK failed (the ORM then rejects with the ROLLBACK's error), this
   * rejects with the work's error, as a lost connection; a code-less failure of the ORM's own
   * BEGIN or COMMIT is one too.
   */
  run<T>(open: (inside: (work: () => Promise<T>) => Promise<T>) => Promise<T>): Promise<T>;
  /**
   * Called with what the handler threw, on its transaction, before the ORM rolls back: an error
   * without a SQLSTATE is a lost connection when the transaction no longer answers `SELECT 1`,
   * and the handler's own when it does.
   */
  screen(error: unknown, sql: SqlExecutor): Promise<void>;
  /**
   * One cheap statement after the handler returned: on a transaction aborted by a failed statement
   * whose error was caught, PostgreSQL refuses it (25P02) — where COMMIT would silently roll back —
   * and this rejects with `abortedTransaction()`. Any other failure of it is the database's, not
   * the handler's (which returned normally): the connection died while the handler awaited
   * something else, and the error is reported as a lost connection (nothing charged).
   */
  probe(sql: SqlExecutor): Promise<void>;
}

const isObject = (value: unknown): value is object => typeof value === 'object' && value !== null;

/**
 * `rollbackFailureRejects`: the ORM rejects with the ROLLBACK's error when it failed (Knex), so a
 * code-less error needs no `SELECT 1` to tell; TypeORM drops that error and MikroORM's Knex
 * transaction (opened without a callback) does not always see it.
 */
export function handlerErrors(options: { rollbackFailureRejects: boolean }): HandlerErrors {
  const notTheDatabase = new WeakSet<object>();
  const lost = new WeakSet<object>();
  return {
    errorCode(error) {
      const code = findErrorCode(error);
      if (isObject(error) && lost.has(error))
        return code !== undefined && CONNECTION_ENDED.test(code) ? code : '08006';
      if (code === undefined || SQLSTATE.test(code)) return code;
      return isObject(error) && notTheDatabase.has(error) ? undefined : code;
    },
    async run<T>(open: (inside: (work: () => Promise<T>) => Promise<T>) => Promise<T>): Promise<T> {
      let failed: { error: unknown } | undefined;
      try {
        return await open(async (work) => {
          try {
            return await work();
          } catch (error) {
            failed = { error };
            throw error;
          }
        });
      } catch (error) {
        if (failed === undefined) {
          if (isObject(error) && findErrorCode(error) === undefined) lost.add(error);
          throw error;
        }
        if (error !== failed.error) {
          if (isObject(failed.error)) lost.add(failed.error);
          throw failed.error;
        }
        throw error;
      }
    },
    async probe(sql) {
      try {
        await sql.query({ text: 'SELECT 1', values: [] });
      } catch (error) {
        if (findErrorCode(error) === '25P02') throw abortedTransaction();
        if (isObject(error)) lost.add(error);
        throw error;
      }
    },
    async screen(error, sql) {
      const code = findErrorCode(error);
      // A SQLSTATE says what it is; what says nothing of the database is checked against the
      // transaction's connection. (An ORM swallows or rethrows the ROLLBACK's failure as it likes.)
      if (!isObject(error) || (code !== undefined && SQLSTATE.test(code))) return;
      // Rejected orderings and most handler failures are code-less: no round trip where run() tells.
      if (code === undefined && options.rollbackFailureRejects) return;
      try {
        await sql.query({ text: 'SELECT 1', values: [] });
      } catch (probe) {
        // 25P02: a statement failed earlier and the handler went on; the connection is alive.
        if (findErrorCode(probe) !== '25P02') lost.add(error);
        return;
      }
      if (code !== undefined) notTheDatabase.add(error);
    },
  };
}
