/**
 * The demo's tables as Drizzle sees them (the DDL is the demo's own SQL, in order-service.ts and
 * inventory.ts: Drizzle describes them, it does not create them). The schema is the demo's fresh
 * `txo_demo_<hex>`, known only at run time, hence a function.
 */

import { bigint, integer, numeric, pgSchema, text, timestamp, uuid } from 'drizzle-orm/pg-core';

/** `orders`, `inventory` and `inventory_reservations` in `schema`. */
export function demoTables(schema: string) {
  const s = pgSchema(schema);
  const orders = s.table('orders', {
    id: bigint('id', { mode: 'bigint' }).primaryKey().generatedAlwaysAsIdentity(),
    customerId: text('customer_id').notNull(),
    amount: numeric('amount', { precision: 10, scale: 2 }).notNull(),
    sku: text('sku').notNull(),
    quantity: integer('quantity').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  });
  const inventory = s.table('inventory', {
    sku: text('sku').primaryKey(),
    onHand: bigint('on_hand', { mode: 'number' }).notNull(),
  });
  const reservations = s.table('inventory_reservations', {
    id: bigint('id', { mode: 'bigint' }).primaryKey().generatedAlwaysAsIdentity(),
    eventId: uuid('event_id').notNull(),
    orderId: bigint('order_id', { mode: 'bigint' }).notNull(),
    sku: text('sku')
      .notNull()
      .references(() => inventory.sku),
    quantity: integer('quantity').notNull(),
    reservedAt: timestamp('reserved_at', { withTimezone: true }).notNull().defaultNow(),
  });
  return { orders, inventory, reservations };
}

export type DemoTables = ReturnType<typeof demoTables>;
