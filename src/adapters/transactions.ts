/**
 * The port between tx-outbox and an ORM or driver. The producer needs one thing of the caller's
 * transaction handle: a parameterised query on it (`SqlExecutor`). The inbox needs more: to open
 * its own transaction through the ORM, so the handler's ORM writes and the dedup record commit or
 * roll back together (`TransactionRunner`).
 *
 * One module per ORM (src/adapters/<orm>.ts, subpath `tx-outbox/<orm>`) implements both, typed
 * structurally: no ORM is imported at run time by anything but its own module, and none is a
 * dependency of the package.
 */
import { OutboxValidationError } from '../errors.js';
import { enqueue as coreEnqueue, type EnqueueOptions, type EnqueueResult } from '../producer/enqueue.js';
import type { OutboxEvent } from '../producer/event.js';
import type { SqlExecutor } from '../producer/executor.js';

/** What `transaction()` rejects with when `fn` returned but the transaction had aborted. */
export { abortedTransaction } from '../errors.js';
export type { SqlExecutor } from '../producer/executor.js';

/**
 * Opens transactions through an ORM for the inbox (`createInbox({ transactions })`).
 *
 * Rows come back as the driver returns them: the inbox reads numbers with `Number()` (string,
 * number or bigint all do), bytes with `Buffer.from()` (Buffer or Uint8Array), JSON parsed.
 */
export interface TransactionRunner<Tx> {
  /** The ORM's name, for errors and logs: `'drizzle'`, `'prisma'` … */
  readonly name: string;
  /**
   * Runs `fn` in a new READ COMMITTED transaction of the ORM: commits when it resolves, rolls back
   * and rethrows when it throws. `fn` gets the ORM's own transaction object (what the handler
   * writes through) and an executor on that same transaction (what the inbox's statements use).
   * When `fn` resolves with the transaction aborted (a failed statement whose error was caught),
   * nothing is committed and this rejects with `abortedTransaction()`.
   */
  transaction<T>(fn: (tx: Tx, sql: SqlExecutor) => Promise<T>): Promise<T>;
  /** One statement on its own, outside any transaction (autocommit). */
  readonly sql: SqlExecutor;
  /**
   * The PostgreSQL SQLSTATE (`'40001'`, `'23505'` …) or the Node network code (`'ECONNRESET'` …)
   * under an error this ORM threw, however it wrapped the driver's error; undefined when neither.
   * The inbox tells a lost connection or a serialization failure (redeliver, nothing charged) from
   * a handler's own failure (an attempt charged) by it.
   */
  errorCode(error: unknown): string | undefined;
}

/** An adapter's `enqueue`: the core's two overloads, on that ORM's transaction handle. */
export interface AdapterEnqueue<Tx> {
  (tx: Tx, event: OutboxEvent, options?: EnqueueOptions): Promise<EnqueueResult>;
  (tx: Tx, events: readonly OutboxEvent[], options?: EnqueueOptions): Promise<EnqueueResult[]>;
}

/**
 * Makes an adapter's `enqueue` from the one thing that differs between ORMs: `executorOf` checks
 * the handle (throwing `notInTransaction(…)`, which the returned function turns into a rejection)
 * and wraps it into an executor; validation, options and results are the core `enqueue`'s.
 */
export function enqueueThrough<Tx>(executorOf: (tx: Tx) => SqlExecutor): AdapterEnqueue<Tx> {
  return (async (tx: Tx, input: OutboxEvent | readonly OutboxEvent[], options?: EnqueueOptions) => {
    const sql = executorOf(tx);
    return Array.isArray(input)
      ? coreEnqueue(sql, input as readonly OutboxEvent[], options)
      : coreEnqueue(sql, input as OutboxEvent, options);
  }) as AdapterEnqueue<Tx>;
}

/**
 * The error for a handle that is not inside a transaction: `what` says what it is, `fix` how to
 * get the transaction's handle — e.g. `notInTransaction('drizzle', 'is the database, not a
 * transaction', 'Call enqueue(tx, …) inside db.transaction(async (tx) => …).')`.
 */
export function notInTransaction(orm: string, what: string, fix: string): OutboxValidationError {
  return new OutboxValidationError(
    'tx',
    `${what} (${orm}), so the event would not share the business transaction`,
    fix,
  );
}

/**
 * Walks an error's wrappers (`cause`, TypeORM's `driverError`, Knex's and MikroORM's `original…`,
 * Prisma's `meta`) for a string `code` that is a SQLSTATE (five characters, digits and capitals)
 * or a Node network code (`E…`/`UND_ERR_…`). A helper for `errorCode`; adapters add what their ORM
 * needs on top.
 */
export function findErrorCode(error: unknown, depth = 0): string | undefined {
  if (error === null || typeof error !== 'object' || depth > 6) return undefined;
  const e = error as Record<string, unknown>;
  const code = e['code'];
  if (typeof code === 'string' && (/^[0-9A-Z]{5}$/.test(code) || /^(E[A-Z]+|UND_ERR_[A-Z_]+)$/.test(code))) {
    return code;
  }
  for (const key of ['cause', 'driverError', 'originalError', 'original', 'meta']) {
    const found = findErrorCode(e[key], depth + 1);
    if (found !== undefined) return found;
  }
  return undefined;
}
