/**
 * `--orm pg` (the default): node-postgres without an ORM, the core `enqueue` on a checked-out
 * client inside BEGIN … COMMIT, and the inbox on the inventory's pool.
 */

import type { PoolClient } from 'pg';
import { enqueue } from '../../../producer/enqueue.js';
import { Checkout } from '../../../schema/checkout.js';
import { withSchemaName } from '../database.js';
import type { DemoOrm, OpenOrm } from './variant.js';

const INSERT_ORDER_SQL = `
INSERT INTO {{schema}}.orders (customer_id, amount, sku, quantity) VALUES ($1, $2, $3, $4)
RETURNING id::text AS id`;
/** The business effect, one round trip: lower the SKU's stock and record the reservation. */
const RESERVE_SQL = `
WITH stock AS (
  UPDATE {{schema}}.inventory SET on_hand = on_hand - $4::integer WHERE sku = $3 RETURNING sku
)
INSERT INTO {{schema}}.inventory_reservations (event_id, order_id, sku, quantity)
SELECT $1::uuid, $2::bigint, sku, $4::integer FROM stock`;

export const open: OpenOrm = async (pools, schema): Promise<DemoOrm<PoolClient>> => {
  const insertOrder = withSchemaName(INSERT_ORDER_SQL, schema);
  const reserve = withSchemaName(RESERVE_SQL, schema);
  return {
    name: 'pg',
    label: 'node-postgres (no ORM)',
    orders: {
      async placeOrder(order, event, options, rollBack) {
        const lease = await Checkout.of(pools.orders);
        const { client } = lease;
        try {
          await client.query('BEGIN');
          const { rows } = await client.query<{ id: string }>(insertOrder, [
            order.customerId,
            order.amount,
            order.sku,
            order.quantity,
          ]);
          const { eventId } = await enqueue(client, event(rows[0]!.id), options);
          await client.query(rollBack ? 'ROLLBACK' : 'COMMIT');
          lease.release();
          return eventId;
        } catch (error) {
          await client.query('ROLLBACK').catch(() => undefined);
          lease.release(error ?? true);
          throw error;
        }
      },
    },
    inventory: {
      inboxTransactions: { pool: pools.inventory },
      async reserve(tx, { eventId, orderId, sku, quantity }) {
        const { rowCount } = await tx.query(reserve, [eventId, orderId, sku, quantity]);
        return rowCount === 1;
      },
    },
    close: async () => undefined,
  };
};
