/**
 * tx-outbox for Prisma (`tx-outbox/prisma`): `enqueue` on the `tx` of an interactive transaction,
 * `prisma.$transaction(async (tx) => …)`, and `transactions(prisma)` for the inbox. Both go through
 * Prisma's raw-query API (`$queryRawUnsafe`), so the events share the transaction of the model
 * writes. Typed structurally: Prisma is never imported, at run time or in the emitted types.
 *
 * Tested with Prisma 7 (prisma 7.10.1, @prisma/client 7.10.0, `prisma-client` generator) on the
 * `@prisma/adapter-pg` driver adapter; the types and checks fit Prisma 6 too (untested).
 */
import { OutboxValidationError } from '../errors.js';
import {
  type AdapterEnqueue,
  abortedTransaction,
  enqueueThrough,
  findErrorCode,
  notInTransaction,
  type SqlExecutor,
  type TransactionRunner,
} from './transactions.js';

/**
 * What tx-outbox needs of a Prisma interactive transaction's `tx`: its raw query. Prisma types
 * `tx` as the client without `$connect`/`$disconnect` (`Omit<PrismaClient, '$connect' | …>`), so
 * `$connect?: never` makes passing the PrismaClient itself a compile error.
 */
export interface PrismaTransactionLike {
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): PromiseLike<T>;
  readonly $connect?: never;
  readonly $disconnect?: never;
}

/** Prisma's `$transaction` options that the runner sets. */
export interface PrismaTransactionOptions {
  readonly isolationLevel?: 'ReadCommitted';
  readonly timeout?: number;
  readonly maxWait?: number;
}

/** What `transactions()` needs of a PrismaClient (plain or `$extends`-ed). */
export interface PrismaClientLike<Tx extends PrismaTransactionLike> {
  $transaction<R>(fn: (tx: Tx) => Promise<R>, options?: PrismaTransactionOptions): PromiseLike<R>;
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): PromiseLike<T>;
  $connect(): PromiseLike<void>;
}

const FIX_ENQUEUE = 'Call enqueue(tx, …) inside prisma.$transaction(async (tx) => …), passing that tx.';

/**
 * Refuses what cannot be an interactive transaction's `tx`: the root client (each raw query would
 * run in its own autocommit transaction), anything without `$queryRawUnsafe`. In an interactive
 * transaction Prisma leaves `$connect` undefined; the root and extended clients have it.
 */
function asTransaction(tx: unknown): PrismaTransactionLike {
  if (
    tx === null ||
    typeof tx !== 'object' ||
    typeof (tx as { $queryRawUnsafe?: unknown }).$queryRawUnsafe !== 'function'
  ) {
    throw notInTransaction('prisma', 'is not a Prisma transaction client', FIX_ENQUEUE);
  }
  if (typeof (tx as { $connect?: unknown }).$connect === 'function') {
    throw notInTransaction('prisma', 'is the PrismaClient, not an interactive transaction', FIX_ENQUEUE);
  }
  return tx as PrismaTransactionLike;
}

/**
 * A parameter as Prisma 7 with adapter-pg binds it right. Dates go as ISO strings: Prisma sends a
 * Date as a timestamp without zone, which a `::timestamptz` reads in the session's TimeZone (off
 * by the UTC offset outside UTC). Bytes go as bytea hex text (`\x…`): in an array Prisma converts
 * Buffers only when the first element is one, and sends the others as base64 text.
 */
function toPrismaValue(value: unknown): unknown {
  if (value instanceof Date) return value.toISOString();
  if (ArrayBuffer.isView(value)) {
    return `\\x${Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('hex')}`;
  }
  if (Array.isArray(value)) return value.map(toPrismaValue);
  return value;
}

/** The raw query of a Prisma client or transaction as a `SqlExecutor` (statement names unused). */
function executorOn(client: Pick<PrismaTransactionLike, '$queryRawUnsafe'>): SqlExecutor {
  return {
    async query<R extends object = Record<string, unknown>>(query: {
      text: string;
      values: readonly unknown[];
    }): Promise<{ rows: R[] }> {
      const rows = await client.$queryRawUnsafe<R[]>(query.text, ...query.values.map(toPrismaValue));
      return { rows: Array.isArray(rows) ? rows : [] };
    },
  };
}

/**
 * Writes events into the outbox on `tx`, the handle of `prisma.$transaction(async (tx) => …)`:
 * they commit or roll back with the transaction's model writes. As the core `enqueue`; the root
 * PrismaClient is refused (a compile error, and an OutboxValidationError on field `tx`).
 */
export const enqueue: AdapterEnqueue<PrismaTransactionLike> = enqueueThrough((tx) =>
  executorOn(asTransaction(tx)),
);

export interface PrismaTransactionsOptions {
  /**
   * Longest an inbox transaction (the handler included) may run before Prisma rolls it back, in
   * ms. Default 60 000: Prisma's own default (5 s) would roll back a slow handler's work.
   */
  readonly timeout?: number;
  /** Longest wait for a connection to start the transaction, in ms. Default 10 000 (Prisma: 2 s). */
  readonly maxWait?: number;
}

export const DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000;
export const DEFAULT_TRANSACTION_MAX_WAIT_MS = 10_000;

function milliseconds(value: number | undefined, field: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    throw new OutboxValidationError(field, `is ${String(value)}`, 'Pass a positive integer of milliseconds.');
  }
  return value;
}

/**
 * The inbox's transactions through Prisma (`createInbox({ transactions: transactions(prisma) })`):
 * READ COMMITTED interactive transactions, the handler gets their `tx`.
 */
export function transactions<Tx extends PrismaTransactionLike>(
  prisma: PrismaClientLike<Tx>,
  options: PrismaTransactionsOptions = {},
): TransactionRunner<Tx> {
  if (
    prisma === null ||
    typeof prisma !== 'object' ||
    typeof (prisma as { $transaction?: unknown }).$transaction !== 'function' ||
    typeof (prisma as { $queryRawUnsafe?: unknown }).$queryRawUnsafe !== 'function'
  ) {
    throw new OutboxValidationError('prisma', 'is not a PrismaClient', 'Pass your PrismaClient instance.');
  }
  if (typeof (prisma as { $connect?: unknown }).$connect !== 'function') {
    throw new OutboxValidationError(
      'prisma',
      'is an interactive transaction, not the PrismaClient',
      'Pass the PrismaClient: the inbox opens a transaction of its own per message.',
    );
  }
  const txOptions: PrismaTransactionOptions = {
    isolationLevel: 'ReadCommitted',
    timeout: milliseconds(options.timeout, 'timeout', DEFAULT_TRANSACTION_TIMEOUT_MS),
    maxWait: milliseconds(options.maxWait, 'maxWait', DEFAULT_TRANSACTION_MAX_WAIT_MS),
  };
  return {
    name: 'prisma',
    async transaction<T>(fn: (tx: Tx, sql: SqlExecutor) => Promise<T>): Promise<T> {
      try {
        return await prisma.$transaction(async (tx) => {
          const result = await fn(tx, executorOn(tx));
          await assertNotAborted(tx);
          return result;
        }, txOptions);
      } catch (error) {
        if (isConnectionLoss(error)) lost.add(error);
        throw error;
      }
    },
    sql: executorOn(prisma),
    errorCode: (error) => (lost.has(error as object) ? '08006' : prismaErrorCode(error)),
  };
}

/** Errors `transaction()` rejected with because its connection was lost. */
const lost = new WeakSet<object>();

/**
 * pg's own errors for a connection that ended under a statement (the server or the network went
 * away), which adapter-pg passes through unwrapped and without a code. Only an error of the
 * runner's transaction is read this way: it is then that transaction's connection that was lost.
 */
const PG_CONNECTION_LOSS =
  /^(Connection terminated( unexpectedly)?|Client has encountered a connection error and is not queryable|Client was closed and is not queryable)$/;

function isConnectionLoss(error: unknown): error is Error {
  return (
    error instanceof Error && prismaErrorCode(error) === undefined && PG_CONNECTION_LOSS.test(error.message)
  );
}

/**
 * Prisma sends COMMIT even when a statement failed and its error was caught; PostgreSQL then
 * rolls back without an error. One statement tells: in an aborted transaction it fails (25P02).
 * Throwing here makes Prisma roll back, and the caller learns nothing was committed.
 */
async function assertNotAborted(tx: PrismaTransactionLike): Promise<void> {
  try {
    await tx.$queryRawUnsafe('SELECT 1');
  } catch (error) {
    if (prismaErrorCode(error) === '25P02') throw abortedTransaction();
    throw error;
  }
}

/** Prisma's own codes that stand for a SQLSTATE or a lost connection when nothing else says. */
const PRISMA_CODES: Readonly<Record<string, string>> = {
  P1001: 'ECONNREFUSED', // can't reach the database server
  P1017: 'ECONNRESET', // the server closed the connection
  P2002: '23505', // unique constraint failed
  P2034: '40001', // write conflict or deadlock: retry the transaction
};

/** adapter-pg's kinds for network errors, which carry no SQLSTATE. */
const ADAPTER_KINDS: Readonly<Record<string, string>> = {
  DatabaseNotReachable: 'ECONNREFUSED',
  ConnectionClosed: 'ECONNRESET',
  SocketTimeout: 'ETIMEDOUT',
};

/**
 * The SQLSTATE under a Prisma error. Prisma 7 with a driver adapter wraps the driver's error:
 * `PrismaClientKnownRequestError` (code `P2010`, `P2002` …) with `meta.driverAdapterError.cause`
 * holding `originalCode`, or the `DriverAdapterError` itself. Prisma 6's engine puts it in
 * `meta.code`. Prisma's `P…` codes have the shape of a SQLSTATE, so they are never returned as one.
 * Network codes come only from Prisma's connection errors (`P1001`, adapter-pg's kinds).
 */
export function prismaErrorCode(error: unknown, depth = 0): string | undefined {
  if (error === null || typeof error !== 'object' || depth > 6) return undefined;
  const e = error as { code?: unknown; name?: unknown; cause?: unknown; meta?: unknown };
  const adapterError =
    e.name === 'DriverAdapterError'
      ? e
      : (e.meta as { driverAdapterError?: { cause?: unknown } } | undefined)?.driverAdapterError;
  const cause = adapterError?.cause as { originalCode?: unknown; kind?: unknown } | undefined;
  if (cause && typeof cause === 'object') {
    if (typeof cause.originalCode === 'string') return cause.originalCode;
    if (typeof cause.kind === 'string' && ADAPTER_KINDS[cause.kind]) return ADAPTER_KINDS[cause.kind];
  }
  if (typeof e.code === 'string' && /^P[1-9]\d{3}$/.test(e.code)) {
    return findErrorCode(e.meta, depth + 1) ?? prismaErrorCode(e.cause, depth + 1) ?? PRISMA_CODES[e.code];
  }
  // Not Prisma's: a SQLSTATE only. A network code here is the handler's own call failing (another
  // service down), its failure, not the database's; Prisma reports its own as P1001 or a kind.
  const code = findErrorCode(error, depth);
  return code !== undefined && SQLSTATE.test(code) ? code : undefined;
}

const SQLSTATE = /^[0-9A-Z]{5}$/;
