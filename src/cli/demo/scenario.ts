/**
 * The demo's scenario: set up the database, the sink and a relay; run the order service
 * for the requested time; drain; stop the relay; print the verdict.
 */

import { outboxStatus } from '../../ops/status.js';
import type { Relay } from '../../relay/relay.js';
import { createRelay } from '../../relay/relay.js';
import { migrate } from '../../schema/migrate.js';
import { type LogLevelOptions, sleep } from '../common.js';
import { type Database, openDatabase } from './database.js';
import { type DemoContext, throwIfInterrupted } from './lifecycle.js';
import { Monitor } from './monitor.js';
import {
  AGGREGATES,
  createOrdersTable,
  Ledger,
  OrderService,
  ROLLBACK_RATIO,
  WRITERS,
} from './order-service.js';
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
}

/** Runs the demo; true when every check held. */
export async function demo(options: DemoCliOptions, context: DemoContext): Promise<boolean> {
  const { database, sink, relay, verifier } = await setUp(options, context);
  printIntro(options, database, sink);
  const { pool, schema } = database;
  const { signal } = context;
  const ledger = new Ledger();
  const monitor = new Monitor(pool, schema, ledger, verifier, context.line);
  context.cleanup.add('stop the status line', async () => monitor.stop());
  monitor.start();
  const service = new OrderService(pool, schema, sink.topic, relay, ledger, context.logger);
  await service.run(options.rate, options.duration * 1000, signal);
  throwIfInterrupted(signal);
  monitor.phase = 'draining';
  await drain(ledger, verifier, signal);
  throwIfInterrupted(signal);
  monitor.stop();
  await relay.stop({ timeout: RELAY_STOP_TIMEOUT_MS });
  const after = await outboxStatus(pool, { schema });
  return printSummary({ ledger, verifier, relay, after, elapsed: monitor.elapsedSeconds() });
}

/** Database (migrated, with the orders table), consumer, publisher and a running relay. */
async function setUp(
  options: DemoCliOptions,
  context: DemoContext,
): Promise<{ database: Database; sink: Sink; relay: Relay; verifier: Verifier }> {
  const { logger, cleanup, signal } = context;
  const database = await openDatabase(options, WRITERS + 6, logger, cleanup, signal);
  const { pool, schema } = database;
  await migrate(pool, { schema });
  await createOrdersTable(pool, schema);
  throwIfInterrupted(signal);
  const verifier = new Verifier();
  const sink = await openSink(options, verifier, cleanup, logger);
  throwIfInterrupted(signal);
  const relayLogger = logger.child({ component: 'relay' });
  // After Ctrl-C, lost connections are expected (a terminal's Ctrl-C reaches the embedded PostgreSQL too).
  signal.addEventListener('abort', () => {
    for (const l of [logger, relayLogger]) l.level = 'error';
  });
  const relay = createRelay({
    pool,
    publisher: sink.publisher,
    schema,
    listen: false, // same process: the order service wakes the relay right after each commit
    pollIntervalMs: 250,
    leaseMs: 10_000,
    logger: relayLogger,
  });
  cleanup.add('stop the relay', () => relay.stop({ timeout: RELAY_STOP_TIMEOUT_MS }));
  await relay.start();
  return { database, sink, relay, verifier };
}

/** Waits until every committed event was received, up to DRAIN_TIMEOUT_MS. */
async function drain(ledger: Ledger, verifier: Verifier, signal: AbortSignal): Promise<void> {
  const deadline = Date.now() + DRAIN_TIMEOUT_MS;
  while (Date.now() < deadline && !signal.aborted && missing(ledger, verifier).length > 0) {
    await sleep(100, signal);
  }
}

function printIntro(options: DemoCliOptions, database: Database, sink: Sink): void {
  const out = process.stdout;
  out.write(
    `tx-outbox demo: ${database.label}, schema "${database.schema}"; relay publishes to ${sink.label}\n`,
  );
  out.write(
    `order service: ${options.rate} tx/s for ${options.duration} s from ${WRITERS} writers over ` +
      `${AGGREGATES} customers, ~${ROLLBACK_RATIO * 100}% rolled back on purpose after enqueue\n`,
  );
}
