import { OutboxValidationError } from '../errors.js';
import { foreignHandle } from './orm-handles.js';

/**
 * The minimal database port the producer needs: one parameterised query on
 * the caller's own transaction. node-postgres' Client and PoolClient fit it;
 * ORM adapters wrap their transaction handles into it.
 */
export interface SqlExecutor {
  query<R extends object = Record<string, unknown>>(query: {
    text: string;
    values: readonly unknown[];
    name?: string;
  }): Promise<{ rows: R[] }>;
}

interface MaybePg {
  getTransactionStatus?: () => string | null;
  totalCount?: unknown;
  idleCount?: unknown;
  connect?: unknown;
}

/**
 * Refuses handles that cannot be inside the caller's transaction: a pg Pool
 * (each query would run on any connection) or a client known to be idle.
 */
export function assertInTransaction(tx: unknown): asserts tx is SqlExecutor {
  const pg = tx as MaybePg | null;
  // A pg Client or PoolClient (the hot path) is recognised first; only another handle is looked at
  // more closely.
  if (
    typeof pg?.getTransactionStatus !== 'function' ||
    typeof (tx as { query?: unknown }).query !== 'function'
  ) {
    assertOtherHandle(tx);
    return;
  }
  const refused = statusRefusal(pg.getTransactionStatus());
  if (refused !== undefined) throw refused;
}

/** The refusal for a pg client's transaction status: idle or failed; undefined inside one. */
function statusRefusal(status: string | null): OutboxValidationError | undefined {
  if (status === 'I') {
    return new OutboxValidationError(
      'tx',
      'is not inside a transaction (status idle)',
      "Run BEGIN first: the event must commit with the business change, in the caller's transaction.",
    );
  }
  if (status === 'E') {
    return new OutboxValidationError(
      'tx',
      'is in a failed transaction',
      'ROLLBACK and retry the transaction.',
    );
  }
  return undefined;
}

/** pg's `Query` (a submittable), as far as `sendInTransaction` uses it. */
interface PgQuery {
  submit(connection: unknown): Error | undefined;
}
type PgQueryClass = new (
  config: { text: string; values: readonly unknown[]; name?: string },
  values: undefined,
  callback: (error: Error | null, result: { rows: unknown[] }) => void,
) => PgQuery;

/**
 * Sends one of enqueue's statements, checking that `tx` is still in its transaction at the last
 * moment: `enqueue` awaits between its door check and the send (loading the OpenTelemetry API,
 * the backpressure read), and a transaction that rolled back meanwhile would let the statement run
 * in autocommit — an event committed without its business change. Any executor is checked again
 * here. A node-postgres client is checked when the statement leaves its queue (pg's `Query.submit`,
 * after the ReadyForQuery of whatever ran before it): a ROLLBACK queued ahead of it has then
 * finished, where the status read now would still say "in transaction".
 */
export function sendInTransaction<R extends object>(
  tx: SqlExecutor,
  query: { text: string; values: unknown[]; name?: string },
): Promise<{ rows: R[] }> {
  assertInTransaction(tx);
  const client = tx as unknown as MaybePg & { constructor?: { Query?: unknown }; query(q: PgQuery): unknown };
  const Query = client.constructor?.Query as PgQueryClass | undefined;
  if (typeof client.getTransactionStatus !== 'function' || typeof Query !== 'function')
    return tx.query<R>(query);
  const status = client.getTransactionStatus.bind(client);
  return new Promise((resolve, reject) => {
    const q = new Query(query, undefined, (error, result) =>
      error ? reject(error) : resolve(result as { rows: R[] }),
    );
    const submit = q.submit;
    q.submit = function (this: PgQuery, connection: unknown) {
      // pg fails the query with the returned error, without sending it.
      return statusRefusal(status()) ?? submit.call(this, connection);
    };
    client.query(q);
  });
}

/**
 * A handle that is not a pg client: a Pool, or another library's handle (refused, naming the
 * subpath that takes it — TypeORM's EntityManager has a `query` method, yet must not be called),
 * or an executor of the caller's own making (accepted).
 */
function assertOtherHandle(tx: unknown): asserts tx is SqlExecutor {
  const foreign = foreignHandle(tx);
  if (foreign !== undefined) {
    throw new OutboxValidationError(
      'tx',
      `is ${foreign.what}, which the core enqueue (node-postgres) does not take`,
      `Import { enqueue } from 'tx-outbox/${foreign.subpath}' and call it with the ${foreign.orm} transaction.`,
    );
  }
  if (tx === null || typeof tx !== 'object' || typeof (tx as { query?: unknown }).query !== 'function') {
    throw new OutboxValidationError(
      'tx',
      'is not a database handle',
      "Pass the transaction's client (PoolClient).",
    );
  }
  const pg = tx as MaybePg;
  if (
    typeof pg.totalCount === 'number' &&
    typeof pg.idleCount === 'number' &&
    typeof pg.connect === 'function'
  ) {
    throw new OutboxValidationError(
      'tx',
      'is a Pool, so the event would not share the business transaction',
      'Call pool.connect(), BEGIN, and pass that client.',
    );
  }
}
