/**
 * `createInbox({ transactions })`: the ORM's transaction type flows from the runner to every
 * handler — `inbox.handle`, `replayReleased`, the consumer adapters — and a node-postgres handler
 * is refused there. Type checked under `strict` by `npm run typecheck`; never run.
 */
import type { PoolClient } from 'pg';
import { z } from 'zod';
import { consumeNats } from '../../src/consumers/nats.js';
import { consumeRedis } from '../../src/consumers/redis.js';
import { webhookReceiver } from '../../src/consumers/webhook.js';
import {
  createInbox,
  type Inbox,
  type InboxHandler,
  type InboxMessage,
  type pgTransactions,
  type TransactionRunner,
} from '../../src/index.js';

/** The shape of a Drizzle transaction (node-postgres driver), as far as a handler uses it. */
interface DrizzleTx {
  insert(table: { readonly name: string }): { values(row: Record<string, unknown>): Promise<void> };
  rollback(): never;
}
declare const stock: { readonly name: 'stock' };

const OrderPlaced = z.object({ sku: z.string(), qty: z.number() });

export async function drizzleInbox(drizzle: TransactionRunner<DrizzleTx>, message: InboxMessage) {
  const inbox = createInbox({
    transactions: drizzle,
    consumer: 'inventory',
    accepts: [{ type: 'order.placed', schemaVersion: 1, schema: OrderPlaced }],
  });
  const typed: Inbox<{ sku: string; qty: number }, DrizzleTx> = inbox;
  void typed;

  await inbox.handle(message, async (tx, event) => {
    const drizzleTx: DrizzleTx = tx;
    await drizzleTx.insert(stock).values({ sku: event.data.sku, reserved: event.data.qty });
    // @ts-expect-error the handler gets the ORM's transaction, not a pg client
    await tx.query('SELECT 1');
  });

  // @ts-expect-error a node-postgres handler does not fit an inbox on an ORM's transactions
  await inbox.handle(message, async (tx: PoolClient) => tx.query('SELECT 1'));

  const pgHandler: InboxHandler<unknown> = async (tx) => tx.query('SELECT 1');
  // @ts-expect-error nor does one declared ahead as InboxHandler (Tx = PoolClient)
  await inbox.replayReleased(pgHandler);

  const drizzleHandler: InboxHandler<{ sku: string; qty: number }, DrizzleTx> = async (tx, event) =>
    tx.insert(stock).values({ sku: event.data.sku });
  await inbox.replayReleased(drizzleHandler, { limit: 10 });

  // The consumer adapters infer Tx from the inbox.
  const nats = await consumeNats({
    inbox,
    url: 'nats://127.0.0.1:4222',
    stream: 'ORDERS',
    durable: 'inventory',
    handler: async (tx, event) => {
      await tx.insert(stock).values({ sku: event.data.sku });
    },
  });
  await nats.stop();

  await consumeRedis({
    // @ts-expect-error a pg handler given to a consumer of an ORM inbox: their Tx disagree
    inbox,
    url: 'redis://127.0.0.1:6379',
    stream: 'orders',
    group: 'inventory',
    handler: async (tx: PoolClient) => tx.query('SELECT 1'),
  });

  webhookReceiver({ inbox, secret: 'whsec_c2VjcmV0', handler: drizzleHandler });
}

/** With `pool`, or with `pgTransactions(pool)`, the handler gets the PoolClient, as before. */
export async function pgInbox(runner: ReturnType<typeof pgTransactions>, message: InboxMessage) {
  const inbox = createInbox({ transactions: runner, consumer: 'audit' });
  const same: Inbox<unknown> = inbox;
  await same.handle(message, async (tx) => tx.query('SELECT 1'));
}
