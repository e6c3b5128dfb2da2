/**
 * `--orm prisma`: Prisma 7 with the @prisma/adapter-pg driver adapter (over the demo's pools). The
 * order is created with `tx.order.create` in an interactive transaction, the event enqueued with
 * `tx-outbox/prisma`'s `enqueue(tx, …)` on the same `tx`; the inbox opens its transactions with
 * `transactions(prisma)`, and the handler updates the stock and creates the reservation with the
 * model API on the inbox's `tx`. The client is generated on first use (prisma-client.ts).
 */

import { PrismaPg } from '@prisma/adapter-pg';
import type { Pool } from 'pg';
import {
  enqueue,
  type PrismaClientLike,
  type PrismaTransactionLike,
  transactions,
} from '../../../adapters/prisma.js';
import { loadDemoPrismaClient } from './prisma-client.js';
import { type DemoOrm, type NewOrder, type OpenOrm, placed, RolledBackOnPurpose } from './variant.js';

/** What the demo uses of the generated client's interactive-transaction `tx` (its model API). */
interface DemoPrismaTx extends PrismaTransactionLike {
  readonly order: {
    create(args: { data: NewOrder; select: { id: true } }): Promise<{ id: bigint }>;
  };
  readonly inventory: {
    updateMany(args: {
      where: { sku: string };
      data: { onHand: { decrement: bigint } };
    }): Promise<{ count: number }>;
  };
  readonly inventoryReservation: {
    create(args: {
      data: { eventId: string; orderId: bigint; sku: string; quantity: number };
      select: { id: true };
    }): Promise<{ id: bigint }>;
  };
}

interface DemoPrismaClient extends PrismaClientLike<DemoPrismaTx> {
  $disconnect(): Promise<void>;
}

export const open: OpenOrm = async (pools, schema): Promise<DemoOrm<DemoPrismaTx>> => {
  const { PrismaClient, version } = await loadDemoPrismaClient<DemoPrismaClient>();
  const client = (pool: Pool): DemoPrismaClient =>
    new PrismaClient({ adapter: new PrismaPg(pool, { schema }) });
  const orders = client(pools.orders);
  const inventory = client(pools.inventory);
  return {
    name: 'prisma',
    label: `Prisma ${version} (the demo's generated client, @prisma/adapter-pg)`,
    orders: {
      placeOrder: (order, event, options, rollBack) =>
        placed(
          Promise.resolve(
            orders.$transaction(async (tx) => {
              const row = await tx.order.create({ data: order, select: { id: true } });
              const { eventId } = await enqueue(tx, event(String(row.id)), options);
              if (rollBack) throw new RolledBackOnPurpose(eventId);
              return eventId;
            }),
          ),
        ),
    },
    inventory: {
      inboxTransactions: { transactions: transactions(inventory) },
      async reserve(tx, { eventId, orderId, sku, quantity }) {
        const stock = await tx.inventory.updateMany({
          where: { sku },
          data: { onHand: { decrement: BigInt(quantity) } },
        });
        if (stock.count !== 1) return false;
        await tx.inventoryReservation.create({
          data: { eventId, orderId: BigInt(orderId), sku, quantity },
          select: { id: true },
        });
        return true;
      },
    },
    // The pools are the demo's: PrismaPg leaves an external pool open on disconnect.
    close: async () => {
      await Promise.all([orders.$disconnect(), inventory.$disconnect()]);
    },
  };
};
