/**
 * The order service (producer): writes an `orders` row (a customer buys a quantity of
 * one SKU) and enqueues `order.placed` in the same transaction, at a steady rate from a few
 * concurrent writers; about one in ten transactions is rolled back on purpose after the enqueue.
 * The transaction itself goes through the `--orm` variant (orm/*.ts). The ledger records which
 * event ids committed and which rolled back.
 */

import type { Pool } from 'pg';
import type { Logger as PinoLogger } from 'pino';
import { errorMessage } from '../../errors.js';
import type { Relay } from '../../relay/relay.js';
import { sleep } from '../common.js';
import { withSchemaName } from './database.js';
import type { OrderWriter } from './orm/variant.js';

export const WRITERS = 4;
export const AGGREGATES = 50;
export const ROLLBACK_RATIO = 0.1;
/**
 * The catalogue: every order is for 1 to MAX_QUANTITY units of one of these. Enough SKUs that
 * the inventory's concurrent transactions seldom wait on the same stock row.
 */
export const SKUS: readonly string[] = Array.from({ length: 24 }, (_, i) => `sku-${i + 1}`);
const MAX_QUANTITY = 3;

/** The payload of `order.placed` (schema version 1). */
export interface OrderPlaced {
  readonly orderId: string;
  readonly customerId: string;
  readonly amount: string;
  readonly sku: string;
  readonly quantity: number;
}

const CREATE_ORDERS_SQL = `
CREATE TABLE {{schema}}.orders (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  customer_id text NOT NULL,
  amount      numeric(10, 2) NOT NULL,
  sku         text NOT NULL,
  quantity    integer NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
)`;
/** Creates the service's `orders` table in the demo schema. */
export async function createOrdersTable(pool: Pool, schema: string): Promise<void> {
  await pool.query(withSchemaName(CREATE_ORDERS_SQL, schema));
}

/** Which events the producer committed, and which it rolled back after enqueueing them. */
export class Ledger {
  readonly committed = new Set<string>();
  readonly rolledBack = new Set<string>();
  writeErrors = 0;
  lastWriteError: string | undefined;
}

export class OrderService {
  constructor(
    private readonly writer: OrderWriter,
    private readonly schema: string,
    private readonly topic: string | undefined,
    private readonly relay: Relay,
    private readonly ledger: Ledger,
    private readonly logger: PinoLogger,
  ) {}

  /** `rate` transactions per second, spread over WRITERS concurrent writers, for `durationMs`. */
  async run(rate: number, durationMs: number, signal: AbortSignal): Promise<void> {
    const start = performance.now();
    const end = start + durationMs;
    const total = Math.floor((rate * durationMs) / 1000);
    let next = 0;
    const writer = async (): Promise<void> => {
      for (let i = next++; i < total && !signal.aborted; i = next++) {
        const due = start + (i * 1000) / rate;
        if (due >= end) return;
        await sleep(due - performance.now(), signal);
        if (signal.aborted) return;
        await this.placeOrder();
      }
    };
    await Promise.all(Array.from({ length: WRITERS }, writer));
  }

  /** One business transaction: the order row and its event commit (or roll back) together. */
  private async placeOrder(): Promise<void> {
    const customerId = `customer-${String(Math.floor(Math.random() * AGGREGATES)).padStart(2, '0')}`;
    const rollBack = Math.random() < ROLLBACK_RATIO;
    const order = {
      customerId,
      amount: (Math.random() * 500 + 5).toFixed(2),
      sku: SKUS[Math.floor(Math.random() * SKUS.length)]!,
      quantity: 1 + Math.floor(Math.random() * MAX_QUANTITY),
    };
    try {
      const eventId = await this.writer.placeOrder(
        order,
        (orderId) => ({
          aggregateType: 'customer',
          aggregateId: customerId,
          type: 'order.placed',
          topic: this.topic,
          payload: { orderId, ...order } satisfies OrderPlaced,
        }),
        { schema: this.schema, notify: false },
        rollBack,
      );
      if (rollBack) {
        this.ledger.rolledBack.add(eventId);
        return;
      }
      this.ledger.committed.add(eventId);
      this.relay.wake();
    } catch (error) {
      this.failed(error);
    }
  }

  private failed(error: unknown): undefined {
    this.ledger.writeErrors += 1;
    this.ledger.lastWriteError = errorMessage(error);
    this.logger.warn({ err: error }, 'order transaction failed');
    return undefined;
  }
}
