/**
 * The README's and docs/inbox.md's inbox examples, as written there, type checked under `strict`
 * by `npm run typecheck` (tsconfig.json includes test/): the handler's `event.data` is typed from
 * the `accepts` schema. Never run, only compiled.
 */
import type { Pool } from 'pg';
import { z } from 'zod';
import { consumeNats } from '../../src/consumers/nats.js';
import { createInbox, fromEnvelope } from '../../src/index.js';

const OrderPlaced = z.object({ sku: z.string(), qty: z.number().int().positive() });

/** README, "5. Consume exactly once (inbox)". */
export async function readmeExample(pool: Pool, headers: Record<string, string>, payload: Uint8Array) {
  const inbox = createInbox({
    pool,
    consumer: 'inventory', // dedup records and positions are per consumer
    ordering: 'strict', // or 'skip-stale' | 'none'
    accepts: [{ type: 'order.placed', schemaVersion: [1, 2], schema: OrderPlaced /* zod, valibot … */ }],
  });
  const result = await inbox.handle(fromEnvelope(headers, payload), async (tx, event) => {
    await tx.query('UPDATE stock SET reserved = reserved + $1 WHERE sku = $2', [
      event.data.qty,
      event.data.sku,
    ]);
    const qty: number = event.data.qty;
    const sku: string = event.data.sku;
    // @ts-expect-error the schema has no such field
    void event.data.price;
    return [qty, sku];
  });
  return result.status;
}

/** docs/inbox.md, the opening example. */
export async function docsExample(pool: Pool) {
  const inbox = createInbox({
    pool, // the consumer's own database (migrate(pool) creates the inbox tables)
    consumer: 'inventory', // dedup records and positions are per consumer
    ordering: 'strict', // 'strict' | 'skip-stale' | 'none'
    accepts: [{ type: 'order.placed', schemaVersion: [1, 2], schema: OrderPlaced }],
    maxAttempts: 5, // handler failures before quarantine
    maxGapMs: 300_000, // strict: how long a gap may stay unfilled while the aggregate does not advance
  });

  const consumer = await consumeNats({
    inbox,
    url: 'nats://127.0.0.1:4222',
    stream: 'ORDERS',
    durable: 'inventory',
    handler: async (tx, event) => {
      await tx.query('UPDATE stock SET reserved = reserved + $1 WHERE sku = $2', [
        event.data.qty,
        event.data.sku,
      ]);
    },
  });
  // … on shutdown
  await consumer.stop();
}

/** Without a schema the payload is only parsed as JSON: `unknown`, to be narrowed by the handler. */
export async function untyped(pool: Pool, headers: Record<string, string>, payload: Uint8Array) {
  const inbox = createInbox({
    pool,
    consumer: 'audit',
    accepts: [{ type: 'order.placed', schemaVersion: 1 }],
  });
  await inbox.handle(fromEnvelope(headers, payload), async (_tx, event) => {
    // @ts-expect-error data is unknown without a schema
    void event.data.qty;
  });
  // Two schemas: the union of their outputs.
  const Cancelled = z.object({ orderId: z.string() });
  const both = createInbox({
    pool,
    consumer: 'both',
    accepts: [
      { type: 'order.placed', schemaVersion: 1, schema: OrderPlaced },
      { type: 'order.cancelled', schemaVersion: 1, schema: Cancelled },
    ],
  });
  await both.handle(fromEnvelope(headers, payload), async (_tx, event) => {
    const data: z.infer<typeof OrderPlaced> | z.infer<typeof Cancelled> = event.data;
    if ('orderId' in data) void data.orderId.toUpperCase();
    else void data.qty.toFixed();
  });
}
