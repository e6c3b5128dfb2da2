/**
 * Where the relay publishes, who observes and who consumes:
 *
 * - webhook: a local server running the inbox webhook receiver adapter (Standard Webhooks
 *   check, 204 only after the inventory's inbox commit); the verifier taps its HTTP
 *   exchanges, each 204 being a delivery the sender saw acknowledged;
 * - NATS: a JetStream stream of the demo's own, read by the verifier through an ordered
 *   consumer and by the inventory through a durable pull consumer (ack after commit).
 *
 * The consumer adapters are imported when used: they load broker clients that are
 * optional peer dependencies.
 */

import { randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Logger as PinoLogger } from 'pino';
import { errorMessage } from '../../errors.js';
import type { Publisher } from '../../publishers/contract.js';
import { webhookPublisher } from '../../publishers/webhook/index.js';
import { redactText } from '../../redact.js';
import { CliError } from '../common.js';
import { importNats } from '../publishers.js';
import { type LostAcks, loseConsumerAcks } from './faults.js';
import { INVENTORY_CONCURRENCY, INVENTORY_CONSUMER, type Inventory } from './inventory.js';
import type { Cleanup } from './lifecycle.js';
import type { Verifier } from './verifier.js';

/** Redelivery delay of a delivery the inventory deferred (or whose ack the demo dropped), in ms. */
const REDELIVERY_DELAY_MS = 200;
const CONSUMER_STOP_TIMEOUT_MS = 10_000;

export interface Sink {
  readonly publisher: Publisher;
  /** Event topic (NATS subject); undefined for the webhook, which has one URL. */
  readonly topic: string | undefined;
  readonly label: string;
  /** How the inventory receives its deliveries. */
  readonly consumerLabel: string;
  /** Stops the inventory's consumer adapter once its in-flight deliveries are answered. Idempotent. */
  stopConsumer(): Promise<void>;
  /** NATS: how many messages the stream holds (JetStream keeps one per event id). */
  storedMessages?(): Promise<number>;
}

/** The demo's logger, and the inventory's child of it. */
export interface SinkLoggers {
  readonly logger: PinoLogger;
  readonly inventoryLogger: PinoLogger;
}

/** What a sink feeds. */
export interface SinkTargets {
  readonly verifier: Verifier;
  readonly inventory: Inventory;
  /** Consumer-side lost acknowledgements to inject (NATS only: a webhook receiver cannot lose one). */
  readonly consumerAcks: LostAcks;
}

export async function openSink(
  options: { readonly nats?: string },
  targets: SinkTargets,
  cleanup: Cleanup,
  loggers: SinkLoggers,
): Promise<Sink> {
  return options.nats === undefined
    ? openWebhookSink(targets, cleanup, loggers.inventoryLogger)
    : openNatsSink(options.nats, targets, cleanup, loggers);
}

async function openWebhookSink(
  { verifier, inventory }: SinkTargets,
  cleanup: Cleanup,
  inventoryLogger: PinoLogger,
): Promise<Sink> {
  const { createWebhookServer } = await importConsumer('webhook', () => import('../../consumers/webhook.js'));
  const secret = `whsec_${randomBytes(32).toString('base64')}`;
  const receiver = await createWebhookServer({
    inbox: inventory.inbox,
    handler: inventory.handler,
    secret,
    concurrency: INVENTORY_CONCURRENCY,
    logger: inventoryLogger,
  });
  receiver.server.on('request', (req: IncomingMessage, res) => {
    res.once('finish', () => observe(verifier, req, res.statusCode));
  });
  cleanup.add('close the webhook receiver', async () => {
    receiver.server.closeAllConnections();
    await receiver.close();
  });
  const url = `${receiver.url}/events`;
  const publisher = webhookPublisher({ endpoints: url, secret });
  cleanup.add('close the webhook publisher', () => publisher.close());
  return {
    publisher,
    topic: undefined,
    label: `a signed webhook receiver at ${url}`,
    consumerLabel: 'the webhook receiver adapter (Standard Webhooks check, 204 only after the inbox commit)',
    stopConsumer: () => withTimeout(receiver.close()),
  };
}

/**
 * The verifier's tap on the webhook receiver: a 204 is a delivery the sender saw
 * acknowledged; a 4xx is a delivery that failed verification (bad signature, no envelope);
 * a 503 (deferred, or the inbox unavailable) is not a delivery: the sender retries.
 */
function observe(verifier: Verifier, req: IncomingMessage, status: number): void {
  if (status === 204) {
    verifier.recordEnvelope((name) => {
      const value = req.headers[name];
      return Array.isArray(value) ? value[0] : value;
    });
  } else if (status >= 400 && status < 500) {
    verifier.reject();
  }
}

async function openNatsSink(
  servers: string,
  { verifier, inventory, consumerAcks }: SinkTargets,
  cleanup: Cleanup,
  { logger, inventoryLogger }: SinkLoggers,
): Promise<Sink> {
  const { natsPublisher, ensureStream } = await importNats();
  const { connect } = await import('@nats-io/transport-node');
  const { jetstream, jetstreamManager } = await import('@nats-io/jetstream');
  const suffix = randomBytes(4).toString('hex');
  const stream = `TXO_DEMO_${suffix.toUpperCase()}`;
  const prefix = `txo.demo.${suffix}`;
  const nc = await connect({ servers: servers.split(','), name: 'tx-outbox-demo-consumer' }).catch(
    (error: unknown) => {
      throw new CliError(`cannot connect to NATS at ${redactText(servers)}: ${errorMessage(error)}`, 1, {
        cause: error,
      });
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
  const { consumeNats } = await importConsumer('nats', () => import('../../consumers/nats.js'));
  const consumer = await consumeNats({
    inbox: loseConsumerAcks(inventory.inbox, consumerAcks),
    handler: inventory.handler,
    url: servers.split(','),
    clientOptions: { name: 'tx-outbox-demo-inventory' },
    stream,
    durable: INVENTORY_CONSUMER,
    concurrency: INVENTORY_CONCURRENCY,
    deferMs: REDELIVERY_DELAY_MS,
    logger: inventoryLogger,
  });
  cleanup.add('stop the inventory consumer', () => consumer.stop());
  const publisher = natsPublisher({ servers: servers.split(','), stream, streamSubjects: [`${prefix}.>`] });
  cleanup.add('close the NATS publisher', () => publisher.close());
  return {
    publisher,
    topic: `${prefix}.order.placed`,
    label: `NATS JetStream stream ${stream} at ${redactText(servers)}, read by the verifier through an ordered consumer`,
    consumerLabel: `a durable JetStream pull consumer "${INVENTORY_CONSUMER}" (ack only after the inbox commit)`,
    stopConsumer: () => withTimeout(consumer.stop()),
    storedMessages: async () => (await jsm.streams.info(stream)).state.messages,
  };
}

/** A consumer adapter module; a missing broker client library becomes a one-line error. */
async function importConsumer<T>(kind: string, importer: () => Promise<T>): Promise<T> {
  try {
    return await importer();
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'ERR_MODULE_NOT_FOUND') throw error;
    throw new CliError(
      `the demo's ${kind} consumer adapter needs a client library that is not installed: ${errorMessage(error)}`,
      1,
      { cause: error },
    );
  }
}

/** Waits for `stopping`, at most CONSUMER_STOP_TIMEOUT_MS (the cleanup stack still closes everything). */
async function withTimeout(stopping: Promise<void>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, CONSUMER_STOP_TIMEOUT_MS);
  });
  await Promise.race([stopping, timeout]);
  clearTimeout(timer);
}
