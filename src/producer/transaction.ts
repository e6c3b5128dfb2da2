import type { Pool, PoolClient } from 'pg';

/**
 * Runs `fn` in a transaction on one client of `pool`: BEGIN, `fn(client)`, COMMIT —
 * ROLLBACK when `fn` throws (`begin` may name an isolation level). The client is what `enqueue` needs:
 *
 *   await inTransaction(pool, async (tx) => {
 *     await tx.query('INSERT INTO orders …', […]);
 *     await enqueue(tx, { aggregateType: 'order', aggregateId, type: 'order.placed', payload });
 *   });
 */
export async function inTransaction<T>(
  pool: Pool,
  fn: (client: PoolClient) => Promise<T>,
  begin = 'BEGIN',
): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query(begin);
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}
