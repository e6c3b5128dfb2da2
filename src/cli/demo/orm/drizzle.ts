/**
 * `--orm drizzle`: Drizzle ORM on node-postgres (`drizzle-orm/node-postgres`, over the demo's
 * pools). The order is inserted with `tx.insert(orders)`, the event enqueued with
 * `tx-outbox/drizzle`'s `enqueue(tx, …)` on the same transaction; the inbox opens its
 * transactions with `transactions(db)`, and the handler updates the stock and inserts the
 * reservation with Drizzle's query builder on the inbox's `tx`.
 */

import { eq, sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { npmVersion } from 'drizzle-orm/version';
import { enqueue, transactions } from '../../../adapters/drizzle.js';
import { demoTables } from './drizzle-tables.js';
import { type DemoOrm, type OpenOrm, placed, RolledBackOnPurpose } from './variant.js';

type Db = NodePgDatabase<Record<string, never>>;
type Tx = Parameters<Parameters<Db['transaction']>[0]>[0];

export const open: OpenOrm = async (pools, schema): Promise<DemoOrm<Tx>> => {
  const t = demoTables(schema);
  const ordersDb: Db = drizzle({ client: pools.orders });
  const inventoryDb: Db = drizzle({ client: pools.inventory });
  return {
    name: 'drizzle',
    label: `Drizzle ORM ${npmVersion} (drizzle-orm/node-postgres)`,
    orders: {
      placeOrder: (order, event, options, rollBack) =>
        placed(
          ordersDb.transaction(async (tx) => {
            const [row] = await tx.insert(t.orders).values(order).returning({ id: t.orders.id });
            const { eventId } = await enqueue(tx, event(String(row!.id)), options);
            if (rollBack) throw new RolledBackOnPurpose(eventId);
            return eventId;
          }),
        ),
    },
    inventory: {
      inboxTransactions: { transactions: transactions(inventoryDb) },
      async reserve(tx, { eventId, orderId, sku, quantity }) {
        const stock = await tx
          .update(t.inventory)
          .set({ onHand: sql`${t.inventory.onHand} - ${quantity}` })
          .where(eq(t.inventory.sku, sku))
          .returning({ sku: t.inventory.sku });
        if (stock.length !== 1) return false;
        await tx.insert(t.reservations).values({ eventId, orderId: BigInt(orderId), sku, quantity });
        return true;
      },
    },
    close: async () => undefined, // Drizzle holds nothing but the pools, which are the demo's
  };
};
