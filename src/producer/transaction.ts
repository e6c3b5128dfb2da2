import type { Pool, PoolClient } from 'pg';
import { abortedTransaction } from '../errors.js';
import { Checkout } from '../schema/checkout.js';

/** What `inTransaction` threw when its own connection was lost on the way. */
const lost = new WeakSet<object>();

/**
 * True when `inTransaction` threw `error` because the transaction's connection was lost (its
 * ROLLBACK could not run either) — a database fault, not `fn`'s own failure on a live connection.
 */
export function lostItsConnection(error: unknown): boolean {
  return typeof error === 'object' && error !== null && lost.has(error);
}

/**
 * Runs `fn` in a transaction on one client of `pool`: BEGIN, `fn(client)`, COMMIT —
 * ROLLBACK when `fn` throws (`begin` may name an isolation level). The client is what `enqueue` needs:
 *
 *   await inTransaction(pool, async (tx) => {
 *     await tx.query('INSERT INTO orders …', […]);
 *     await enqueue(tx, { aggregateType: 'order', aggregateId, type: 'order.placed', payload });
 *   });
 *
 * A connection lost on the way (a database restart) rejects this call and nothing else: the
 * client is destroyed, not pooled. A transaction that `fn` left aborted (it caught a failed
 * statement's error and returned) rejects with code `TXO_TRANSACTION_ABORTED`: nothing was committed.
 */
export async function inTransaction<T>(
  pool: Pool,
  fn: (client: PoolClient) => Promise<T>,
  begin = 'BEGIN',
): Promise<T> {
  const lease = await Checkout.of(pool);
  const { client } = lease;
  try {
    await client.query(begin);
    const result = await fn(client);
    // After a failed statement whose error `fn` caught, PostgreSQL answers COMMIT with a ROLLBACK
    // and no error: without this, the caller would take nothing-written for committed.
    const { command } = await client.query('COMMIT');
    if (command !== 'COMMIT') {
      throw abortedTransaction();
    }
    lease.release();
    return result;
  } catch (error) {
    // A client whose ROLLBACK failed is in an unknown state: it must not go back to the pool.
    const rollback = await client.query('ROLLBACK').then(
      () => undefined,
      (e: unknown) => e ?? true,
    );
    lease.release(rollback ?? lease.broken);
    if ((rollback !== undefined || lease.broken) && typeof error === 'object' && error !== null) {
      lost.add(error);
    }
    throw error;
  }
}
