/**
 * What the demo's two services need of an ORM: the order service's business transaction (the
 * order row and its event, committed or rolled back together) and the inventory's effect on the
 * inbox transaction. One module per ORM implements it (pg.ts, drizzle.ts, prisma.ts), loaded with
 * a dynamic `import()` by `loadOrm`, so the CLI never loads an ORM the user did not ask for.
 *
 * Everything else — the tables' DDL, the relay, the faults, the verifier, the audit — is the
 * same SQL on node-postgres for every variant: what the demo proves is that the ORM's
 * transactions carry the guarantee, not that each ORM can create tables.
 */

import type { Pool } from 'pg';
import type { TransactionRunner } from '../../../adapters/transactions.js';
import type { EnqueueOptions } from '../../../producer/enqueue.js';
import type { OutboxEvent } from '../../../producer/event.js';

/** The `--orm` choices; `pg` (node-postgres, no ORM) is the default. */
export const ORM_NAMES = ['pg', 'drizzle', 'prisma'] as const;
export type OrmName = (typeof ORM_NAMES)[number];

/** An order as the order service draws it (amount as a decimal string: numeric(10, 2)). */
export interface NewOrder {
  readonly customerId: string;
  readonly amount: string;
  readonly sku: string;
  readonly quantity: number;
}

/** One reservation the inventory applies for an `order.placed`. */
export interface Reservation {
  readonly eventId: string;
  /** The order's bigint id, as the decimal string the event carries. */
  readonly orderId: string;
  readonly sku: string;
  readonly quantity: number;
}

/** How the inventory's inbox opens its transactions: node-postgres' pool, or the ORM's runner. */
export type InboxTransactions<Tx> =
  | { readonly pool: Pool; readonly transactions?: undefined }
  | { readonly transactions: TransactionRunner<Tx>; readonly pool?: undefined };

/** The order service's side. */
export interface OrderWriter {
  /**
   * One business transaction through the ORM: inserts `order`, enqueues `event(orderId)` with
   * the ORM's `enqueue` on the same transaction, then commits — or, with `rollBack`, rolls back
   * after the enqueue. Resolves with the event's id in both cases; rejects when the transaction
   * failed (nothing committed).
   */
  placeOrder(
    order: NewOrder,
    event: (orderId: string) => OutboxEvent,
    options: EnqueueOptions,
    rollBack: boolean,
  ): Promise<string>;
}

/** The inventory's side, `Tx` being the ORM's transaction object the inbox hands the handler. */
export interface InventoryWriter<Tx> {
  readonly inboxTransactions: InboxTransactions<Tx>;
  /**
   * Lowers the SKU's stock and inserts the reservation through the ORM on the inbox's
   * transaction `tx`; false when the SKU is unknown (nothing written).
   */
  reserve(tx: Tx, reservation: Reservation): Promise<boolean>;
}

/** One ORM variant, opened on the demo's pools and schema. */
export interface DemoOrm<Tx> {
  readonly name: OrmName;
  /** For the intro line: the ORM, its version, its driver. */
  readonly label: string;
  readonly orders: OrderWriter;
  readonly inventory: InventoryWriter<Tx>;
  /** Releases what the ORM holds of its own (the pools stay the caller's). */
  close(): Promise<void>;
}

/**
 * What a variant module exports as `open`. The demo holds the variant as `DemoOrm<unknown>`: it
 * never looks into a transaction object, only hands the inbox's back to the variant's `reserve`
 * (methods, so a `DemoOrm<DrizzleTx>` is one).
 */
export type OpenOrm = (pools: DemoPools, schema: string) => Promise<DemoOrm<unknown>>;

/** The demo's node-postgres pools: the order service's and the inventory's (another service). */
export interface DemoPools {
  readonly orders: Pool;
  readonly inventory: Pool;
}

/** Thrown in an ORM's transaction callback to roll the order back on purpose, after its enqueue. */
export class RolledBackOnPurpose extends Error {
  constructor(readonly eventId: string) {
    super('rolled back on purpose by the demo');
    this.name = 'RolledBackOnPurpose';
  }
}

/**
 * The event id of a `placeOrder` transaction run through an ORM (which rolls back when its
 * callback throws): the one it committed, or the one `RolledBackOnPurpose` carries.
 */
export async function placed(transaction: Promise<string>): Promise<string> {
  try {
    return await transaction;
  } catch (error) {
    if (error instanceof RolledBackOnPurpose) return error.eventId;
    throw error;
  }
}
