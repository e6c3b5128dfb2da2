/**
 * The demo's scenario: set up the database, the inventory, the sink and a relay; run the
 * order service for the requested time; drain; stop the relay and the consumer; print the
 * verdict.
 */

import { outboxStatus } from '../../ops/status.js';
import { createRelay, type Relay } from '../../relay/polling/relay.js';
import { migrate } from '../../schema/migrate.js';
import { createPool, type LogLevelOptions, sleep } from '../common.js';
import { type Database, openDatabase } from './database.js';
import { LostAcks, losePublishAcks, quietInjected } from './faults.js';
import { INVENTORY_CONCURRENCY, INVENTORY_CONSUMER, Inventory } from './inventory.js';
import { type DemoContext, throwIfInterrupted } from './lifecycle.js';
import { Monitor } from './monitor.js';
import {
  AGGREGATES,
  createOrdersTable,
  Ledger,
  OrderService,
  ROLLBACK_RATIO,
  SKUS,
  WRITERS,
} from './order-service.js';
import { loadOrm } from './orm/index.js';
import type { DemoOrm, OrmName } from './orm/variant.js';
import { openSink, type Sink } from './sinks.js';
import { printSummary } from './summary.js';
import { missing, Verifier } from './verifier.js';

const DRAIN_TIMEOUT_MS = 15_000;
export const RELAY_STOP_TIMEOUT_MS = 10_000;

export interface DemoCliOptions extends LogLevelOptions {
  readonly databaseUrl?: string;
  readonly nats?: string;
  readonly duration: number;
  readonly rate: number;
  readonly lostAcks: number;
  /** How the order service and the inventory write: node-postgres, Drizzle or Prisma. */
  readonly orm: OrmName;
}

interface Parts {
  readonly database: Database;
  readonly orm: DemoOrm<unknown>;
  readonly sink: Sink;
  readonly relay: Relay;
  readonly verifier: Verifier;
  readonly inventory: Inventory;
  readonly publishAcks: LostAcks;
  readonly consumerAcks: LostAcks;
}

/** Runs the demo; true when every check held. */
export async function demo(options: DemoCliOptions, context: DemoContext): Promise<boolean> {
  const parts = await setUp(options, context);
  const { database, orm, sink, relay, verifier, inventory } = parts;
  printIntro(options, parts);
  const { pool, schema } = database;
  const { signal } = context;
  const ledger = new Ledger();
  const monitor = new Monitor(pool, schema, ledger, verifier, inventory, context.line);
  context.cleanup.add('stop the status line', async () => monitor.stop());
  monitor.start();
  const service = new OrderService(orm.orders, schema, sink.topic, relay, ledger, context.logger);
  await service.run(options.rate, options.duration * 1000, signal);
  throwIfInterrupted(signal);
  monitor.phase = 'draining';
  await drain(ledger, parts, signal);
  throwIfInterrupted(signal);
  monitor.stop();
  await relay.stop({ timeout: RELAY_STOP_TIMEOUT_MS });
  await sink.stopConsumer();
  const after = await outboxStatus(pool, { schema });
  return printSummary({
    ledger,
    verifier,
    relay,
    after,
    elapsed: monitor.elapsedSeconds(),
    publishAcks: parts.publishAcks,
    consumerAcks: parts.consumerAcks,
    tally: inventory.tally,
    audit: await inventory.audit(ledger.committed),
    stored: await sink.storedMessages?.(),
  });
}

/**
 * Database (migrated, with the orders and inventory tables), the ORM variant, inventory consumer,
 * verifier, publisher and a running relay.
 */
async function setUp(options: DemoCliOptions, context: DemoContext): Promise<Parts> {
  const { logger, cleanup, signal } = context;
  // First: a variant that cannot load (its ORM not installed) fails before anything is started.
  const openOrm = await loadOrm(options.orm);
  const database = await openDatabase(options, WRITERS + 6, logger, cleanup, signal);
  const { pool, schema } = database;
  await migrate(pool, { schema });
  await createOrdersTable(pool, schema);
  throwIfInterrupted(signal);
  // The inventory is another service: a pool of its own (here on the same database and schema).
  const inventoryPool = createPool(database.url, logger, INVENTORY_CONCURRENCY + 2);
  cleanup.add('close the inventory pool', () => inventoryPool.end());
  const orm = await openOrm({ orders: pool, inventory: inventoryPool }, schema);
  cleanup.add(`close ${orm.name}`, () => orm.close());
  throwIfInterrupted(signal);
  const inventoryLogger = logger.child({ component: 'inventory' });
  const inventory = await Inventory.create(inventoryPool, schema, orm.inventory, inventoryLogger);
  const verifier = new Verifier();
  const publishAcks = new LostAcks(options.lostAcks);
  // A webhook receiver cannot lose an ack on its own: its 503 would tell the relay the receiver is down.
  const consumerAcks = new LostAcks(options.nats === undefined ? 0 : options.lostAcks);
  const sink = await openSink(options, { verifier, inventory, consumerAcks }, cleanup, {
    logger,
    inventoryLogger,
  });
  throwIfInterrupted(signal);
  const relayLogger = logger.child({ component: 'relay' });
  // After Ctrl-C, lost connections are expected (a terminal's Ctrl-C reaches the embedded PostgreSQL too).
  signal.addEventListener('abort', () => {
    for (const l of [logger, relayLogger, inventoryLogger]) l.level = 'error';
  });
  const relay = createRelay({
    pool,
    publisher: losePublishAcks(sink.publisher, publishAcks),
    schema,
    listen: false, // same process: the order service wakes the relay right after each commit
    pollIntervalMs: 250,
    leaseMs: 10_000,
    // An event whose ack was lost is published again within 100 ms (the default starts at 1 s).
    backoff: { baseMs: 100, capMs: 5_000 },
    logger: quietInjected(relayLogger),
  });
  cleanup.add('stop the relay', () => relay.stop({ timeout: RELAY_STOP_TIMEOUT_MS }));
  await relay.start();
  return { database, orm, sink, relay, verifier, inventory, publishAcks, consumerAcks };
}

/**
 * Waits, up to DRAIN_TIMEOUT_MS, until every committed event was received by the verifier
 * and applied by the inventory, and every event whose ack was lost was delivered again.
 */
async function drain(ledger: Ledger, parts: Parts, signal: AbortSignal): Promise<void> {
  const { verifier, inventory, publishAcks, consumerAcks } = parts;
  const done = (): boolean =>
    missing(ledger, verifier).length === 0 &&
    [...ledger.committed].every((id) => inventory.applied.has(id)) &&
    publishAcks.pending === 0 &&
    consumerAcks.pending === 0;
  const deadline = Date.now() + DRAIN_TIMEOUT_MS;
  while (Date.now() < deadline && !signal.aborted && !done()) {
    await sleep(100, signal);
  }
}

function printIntro(
  options: DemoCliOptions,
  { database, orm, sink, publishAcks, consumerAcks }: Parts,
): void {
  const out = process.stdout;
  out.write(
    `tx-outbox demo: ${database.label}, schema "${database.schema}"; relay publishes to ${sink.label}\n`,
  );
  out.write(`orm: ${orm.label}, for the order service's transactions and the inventory's inbox\n`);
  out.write(
    `order service: ${options.rate} tx/s for ${options.duration} s from ${WRITERS} writers over ` +
      `${AGGREGATES} customers, ~${ROLLBACK_RATIO * 100}% rolled back on purpose after enqueue\n`,
  );
  out.write(
    `inventory: inbox consumer "${INVENTORY_CONSUMER}" (ordering strict) reserves stock of ${SKUS.length} SKUs ` +
      `for each order in the inbox transaction, fed by ${sink.consumerLabel}\n`,
  );
  if (publishAcks.percent === 0) {
    out.write('injecting: nothing (--lost-acks 0)\n');
    return;
  }
  out.write(
    `injecting: ${publishAcks.percent}% of publishes lose their ack after delivery, as if the relay crashed ` +
      'before recording them: the relay publishes them again' +
      (options.nats === undefined ? '\n' : ' (JetStream drops those by Nats-Msg-Id)\n'),
  );
  if (consumerAcks.percent > 0) {
    out.write(
      `           ${consumerAcks.percent}% of inventory deliveries are nak'd after the inbox commit, as if the ` +
        'consumer crashed before acking: JetStream delivers them again\n',
    );
  }
}
