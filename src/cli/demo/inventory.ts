/**
 * The inventory service (consumer): a real inbox consumer. Each `order.placed` reserves
 * the ordered quantity — one `inventory_reservations` row and the SKU's `on_hand` lowered —
 * in the inbox transaction that also records the event id, so a duplicate delivery has no
 * effect. The reservations table deliberately has no unique key on the event id: an effect
 * applied twice would show in the audit. The inbox runs its transactions, and the handler
 * writes, through the `--orm` variant (orm/*.ts); the audit reads the tables with plain SQL.
 */

import type { Pool } from 'pg';
import { z } from 'zod';
import { createInbox, type Inbox, type InboxHandler, type InboxStats } from '../../inbox/inbox.js';
import type { Logger } from '../../logger.js';
import { withSchemaName } from './database.js';
import { type OrderPlaced, SKUS } from './order-service.js';
import type { InventoryWriter } from './orm/variant.js';

export const INVENTORY_CONSUMER = 'inventory';
/** Deliveries the inventory handles at once (across aggregates). */
export const INVENTORY_CONCURRENCY = 8;
const INITIAL_ON_HAND = 1_000_000;

const CREATE_INVENTORY_SQL = `
CREATE TABLE {{schema}}.inventory (
  sku      text PRIMARY KEY,
  on_hand  bigint NOT NULL
)`;
const CREATE_RESERVATIONS_SQL = `
CREATE TABLE {{schema}}.inventory_reservations (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id    uuid NOT NULL,
  order_id    bigint NOT NULL,
  sku         text NOT NULL REFERENCES {{schema}}.inventory (sku),
  quantity    integer NOT NULL,
  reserved_at timestamptz NOT NULL DEFAULT now()
)`;
const STOCK_SQL = 'INSERT INTO {{schema}}.inventory (sku, on_hand) SELECT unnest($1::text[]), $2';
const EFFECTS_PER_EVENT_SQL = `
SELECT event_id::text AS event_id, count(*)::int AS effects
FROM {{schema}}.inventory_reservations GROUP BY event_id`;
const STOCK_TOTALS_SQL = `
SELECT (SELECT count(*) FROM {{schema}}.inventory)::int AS skus,
       (SELECT coalesce(sum(on_hand), 0) FROM {{schema}}.inventory)::bigint AS on_hand,
       (SELECT coalesce(sum(quantity), 0) FROM {{schema}}.inventory_reservations)::bigint AS reserved`;
const QUARANTINED_SQL = 'SELECT count(*)::int AS n FROM {{schema}}.inbox_quarantine WHERE consumer = $1';

/** The accepted payload of `order.placed` v1 (a Standard Schema: the inbox validates with it). */
const OrderPlacedSchema = z.object({
  orderId: z.string().regex(/^\d+$/),
  customerId: z.string(),
  amount: z.string(),
  sku: z.string(),
  quantity: z.number().int().positive(),
});

/** What the inventory tables say, read after the run. */
export interface InventoryAudit {
  /** Reservation rows: the effects applied. */
  readonly effects: number;
  /** Committed events with exactly one reservation. */
  readonly committedOnce: number;
  /** Events with more than one reservation (an effect applied twice). */
  readonly appliedTwice: number;
  /** Reservations for events the producer did not commit (rolled back or unknown). */
  readonly notCommitted: number;
  readonly initialOnHand: number;
  readonly onHand: number;
  /** Sum of the reserved quantities; `initialOnHand - onHand` must equal it. */
  readonly reserved: number;
  /** Rows in `inbox_quarantine` for this consumer. */
  readonly quarantined: number;
}

export class Inventory {
  /** Event ids whose effect the inbox committed. */
  readonly applied = new Set<string>();
  /**
   * The inventory's inbox, noting what it applied; hand it to a consumer adapter. Its transaction
   * object is the variant's (`unknown` here: only the variant's `reserve` looks into it).
   */
  readonly inbox: Inbox<OrderPlaced, unknown>;
  /** Applies one `order.placed` on the inbox transaction, through the variant. */
  readonly handler: InboxHandler<OrderPlaced, unknown>;

  /** What the inbox answered so far, per status. */
  get tally(): InboxStats {
    return this.inbox.stats();
  }

  private constructor(
    private readonly pool: Pool,
    private readonly schema: string,
    writer: InventoryWriter<unknown>,
    logger: Logger,
  ) {
    const inbox = createInbox({
      ...writer.inboxTransactions,
      consumer: INVENTORY_CONSUMER,
      schema,
      ordering: 'strict',
      accepts: [{ type: 'order.placed', schemaVersion: 1, schema: OrderPlacedSchema }],
      logger,
    });
    this.inbox = {
      consumer: inbox.consumer,
      handle: async (message, handler) => {
        const result = await inbox.handle(message, handler);
        if (result.status === 'processed') this.applied.add(message.eventId);
        return result;
      },
      replayReleased: (handler, options) => inbox.replayReleased(handler, options),
      stats: () => inbox.stats(),
    };
    this.handler = async (tx, event) => {
      const { sku, quantity, orderId } = event.data;
      const reserved = await writer.reserve(tx, { eventId: event.eventId, orderId, sku, quantity });
      // An unknown SKU fails the handler: retried, then quarantined with the reason.
      if (!reserved) throw new Error(`unknown SKU ${sku}`);
    };
  }

  /**
   * Creates the inventory tables in `schema` (next to the inbox tables of `migrate`) with
   * every SKU in stock; `pool` is the inventory's own (the variant's `writer` opened on it).
   */
  static async create(
    pool: Pool,
    schema: string,
    writer: InventoryWriter<unknown>,
    logger: Logger,
  ): Promise<Inventory> {
    await pool.query(withSchemaName(CREATE_INVENTORY_SQL, schema));
    await pool.query(withSchemaName(CREATE_RESERVATIONS_SQL, schema));
    await pool.query(withSchemaName(STOCK_SQL, schema), [SKUS, INITIAL_ON_HAND]);
    return new Inventory(pool, schema, writer, logger);
  }

  /** Reads the effects back: how many per event, the stock, the quarantine. */
  async audit(committed: ReadonlySet<string>): Promise<InventoryAudit> {
    const [perEvent, totals, quarantine] = await Promise.all([
      this.pool.query<{ event_id: string; effects: number }>(
        withSchemaName(EFFECTS_PER_EVENT_SQL, this.schema),
      ),
      this.pool.query<{ skus: number; on_hand: string; reserved: string }>(
        withSchemaName(STOCK_TOTALS_SQL, this.schema),
      ),
      this.pool.query<{ n: number }>(withSchemaName(QUARANTINED_SQL, this.schema), [INVENTORY_CONSUMER]),
    ]);
    let effects = 0;
    let committedOnce = 0;
    let appliedTwice = 0;
    let notCommitted = 0;
    for (const row of perEvent.rows) {
      effects += row.effects;
      if (row.effects > 1) appliedTwice += 1;
      if (!committed.has(row.event_id)) notCommitted += 1;
      else if (row.effects === 1) committedOnce += 1;
    }
    const stock = totals.rows[0]!;
    return {
      effects,
      committedOnce,
      appliedTwice,
      notCommitted,
      initialOnHand: stock.skus * INITIAL_ON_HAND,
      onHand: Number(stock.on_hand),
      reserved: Number(stock.reserved),
      quarantined: quarantine.rows[0]!.n,
    };
  }
}
