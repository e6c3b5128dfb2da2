/**
 * tx-outbox on postgres.js (`tx-outbox/postgres-js`): `enqueue` on the transaction of
 * `sql.begin(async (tx) => …)`, and `transactions(sql)` for `createInbox({ transactions })`.
 *
 * postgres.js is used through the handle it gives (structural types below): nothing here imports
 * it. Every parameter is bound as text of unknown type (OID 705), as node-postgres binds them, so
 * PostgreSQL infers its type from the SQL and postgres.js applies none of its serialisers (its
 * jsonb serialiser would JSON-encode the JSON text again, and it types `[Buffer, …]` as bytea, not
 * bytea[]).
 */
import { OutboxValidationError } from '../errors.js';
import { CONNECTION_CODES, guarded, guardedBegin } from './postgres-js-guard.js';
import { textParameter } from './text-parameters.js';
import {
  type AdapterEnqueue,
  abortedTransaction,
  enqueueThrough,
  findErrorCode,
  notInTransaction,
  type SqlExecutor,
  type TransactionRunner,
} from './transactions.js';

/** PostgreSQL's `unknown` type: the server infers the parameter's type, as for an untyped one. */
const UNKNOWN_OID = 705;

/** What tx-outbox runs statements through: `sql`, a reserved connection or a transaction. */
export interface PostgresJsQueryable {
  /** `parameters`: what `typed()` returned, or null (typed `never[]` to fit `ParameterOrJSON<…>[]`). */
  unsafe(
    query: string,
    parameters: never[],
    options: { prepare: boolean },
  ): PromiseLike<ArrayLike<Record<string, unknown>>>;
  typed(value: unknown, oid: number): unknown;
}

/**
 * The `tx` of `sql.begin(async (tx) => …)` (a `TransactionSql`), or of `tx.savepoint(…)`. The root
 * `sql` and a reserved connection have no `savepoint`: passing them does not compile.
 */
export interface PostgresJsTransaction extends PostgresJsQueryable {
  savepoint(...args: never[]): unknown;
}

/** The `postgres(…)` instance (`Sql`). */
export interface PostgresJsSql extends PostgresJsQueryable {
  begin<T>(options: string, fn: (tx: PostgresJsTransaction) => T | Promise<T>): PromiseLike<unknown>;
}

/** The transaction type of a `postgres(…)` instance: its `TransactionSql`, with its custom types. */
export type TransactionOf<S> = S extends {
  begin(options: string, fn: (tx: infer Tx) => infer _R): unknown;
}
  ? Tx
  : PostgresJsTransaction;

/**
 * Writes events into the outbox on a postgres.js transaction, in one round trip:
 *
 *   await sql.begin(async (tx) => {
 *     await tx`INSERT INTO orders ${tx(order)}`;
 *     await enqueue(tx, { aggregateType: 'order', aggregateId: order.id, type: 'order.placed', payload });
 *   });
 *
 * `options.prepared` (default true) prepares the statement on the connection (postgres.js names
 * and caches it); a `postgres({ prepare: false })` instance never prepares.
 */
export const enqueue: AdapterEnqueue<PostgresJsTransaction> = enqueueThrough((tx) =>
  executorOn(assertTransaction(tx)),
);

/**
 * The inbox's transactions through postgres.js: `createInbox({ transactions: transactions(sql) })`.
 * Handlers get the `tx` of `sql.begin('isolation level read committed', …)`.
 *
 * postgres.js refuses to commit after a statement failed, even one whose error was caught, and
 * rejects with that statement's error; one `SELECT 1` after the handler tells this case apart, and
 * the runner rejects with `abortedTransaction()` instead, as the port asks. The handler's `tx` is
 * guarded against a lost connection (see postgres-js-guard.ts): it is a proxy of postgres.js's own.
 */
export function transactions<S extends PostgresJsSql>(sql: S): TransactionRunner<TransactionOf<S>> {
  assertRoot(sql);
  // What the handler threw with a network code while its transaction's connection was fine: a
  // service of its own being down, charged to the handler, not the database gone.
  const handlersOwn = new WeakSet<object>();
  return {
    name: 'postgres-js',
    sql: executorOn(sql),
    errorCode: (error) => (isObject(error) && handlersOwn.has(error) ? undefined : errorCode(error)),
    transaction<T>(fn: (tx: TransactionOf<S>, sql: SqlExecutor) => Promise<T>): Promise<T> {
      return guardedBegin<PostgresJsTransaction, T>(
        (callback) => sql.begin('isolation level read committed', callback),
        async (raw, state) => {
          const tx = guarded(raw, state);
          const executor = executorOn(tx);
          const value = await fn(tx as unknown as TransactionOf<S>, executor);
          await assertNotAborted(executor);
          return value;
        },
        (error) => {
          if (!isObject(error)) return;
          const code = errorCode(error);
          if (code !== undefined && !SQLSTATE.test(code)) handlersOwn.add(error);
        },
      );
    },
  };
}

const SQLSTATE = /^[0-9A-Z]{5}$/;

const isObject = (value: unknown): value is object => typeof value === 'object' && value !== null;

function executorOn(handle: PostgresJsQueryable): SqlExecutor {
  return {
    async query<R extends object = Record<string, unknown>>(query: {
      text: string;
      values: readonly unknown[];
      name?: string;
    }): Promise<{ rows: R[] }> {
      const values = query.values.map((v) => {
        const text = textParameter(v);
        return text === null ? null : handle.typed(text, UNKNOWN_OID);
      });
      // A result is an Array (its species too): the rows themselves.
      const rows = await handle.unsafe(query.text, values as never[], { prepare: query.name !== undefined });
      return { rows: rows as unknown as R[] };
    },
  };
}

/** Throws `abortedTransaction()` when a statement failed in the transaction, its error caught. */
async function assertNotAborted(executor: SqlExecutor): Promise<void> {
  try {
    await executor.query({ text: 'SELECT 1', values: [] });
  } catch (error) {
    if (errorCode(error) === '25P02') throw abortedTransaction();
    throw error;
  }
}

function assertTransaction(tx: unknown): PostgresJsTransaction {
  const fix = 'Call enqueue(tx, …) inside sql.begin(async (tx) => …), with that tx.';
  const handle = tx as Partial<Record<'unsafe' | 'typed' | 'savepoint' | 'begin' | 'release', unknown>>;
  if (typeof tx !== 'function' || typeof handle.unsafe !== 'function' || typeof handle.typed !== 'function') {
    throw new OutboxValidationError('tx', 'is not a postgres.js transaction', fix);
  }
  if (typeof handle.savepoint === 'function') return tx as unknown as PostgresJsTransaction;
  if (typeof handle.begin === 'function') {
    throw notInTransaction('postgres-js', 'is the postgres() instance, not a transaction', fix);
  }
  if (typeof handle.release === 'function') {
    throw notInTransaction('postgres-js', 'is a reserved connection, not a sql.begin() transaction', fix);
  }
  throw notInTransaction('postgres-js', 'is not a transaction', fix);
}

function assertRoot(sql: unknown): void {
  const handle = sql as Partial<Record<'unsafe' | 'typed' | 'begin' | 'options', unknown>>;
  if (
    typeof sql !== 'function' ||
    typeof handle.begin !== 'function' ||
    typeof handle.unsafe !== 'function' ||
    typeof handle.typed !== 'function'
  ) {
    throw new OutboxValidationError(
      'sql',
      'is not a postgres() instance',
      'Pass the instance postgres(url) returned, not a transaction or a reserved connection.',
    );
  }
  // A column, value or row transform would rename or rewrite what the inbox reads back.
  const transform = (
    handle.options as { transform?: Record<string, { from?: unknown } | undefined> } | undefined
  )?.transform;
  for (const part of ['column', 'value', 'row'] as const) {
    if (transform?.[part]?.from !== undefined) {
      throw new OutboxValidationError(
        'sql',
        `transforms ${part}s (transform.${part})`,
        'Give the inbox a postgres() instance without transform (a second instance on the same database).',
      );
    }
  }
}

function errorCode(error: unknown): string | undefined {
  const found = findErrorCode(error);
  if (found !== undefined) return found;
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? CONNECTION_CODES[code] : undefined;
}
