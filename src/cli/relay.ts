/**
 * `tx-outbox relay`: runs a polling relay as its own service until SIGTERM or
 * SIGINT. The first signal drains the batch in flight (up to 30 s) and gives
 * the partitions back; a second one exits at once with 130.
 */

import type { Command } from 'commander';
import type { Logger as PinoLogger } from 'pino';
import { outboxStatus } from '../ops/status.js';
import type { Publisher } from '../publishers/contract.js';
import { webhookPublisher } from '../publishers/webhook.js';
import { createRelay, type Relay } from '../relay/relay.js';
import {
  addDatabaseOptions,
  addLogLevelOption,
  CliError,
  createLogger,
  createPool,
  type DatabaseOptions,
  databaseUrl,
  EXIT_INTERRUPTED,
  integerOption,
  type LogLevelOptions,
  usageError,
} from './common.js';

/** How long the first SIGTERM/SIGINT lets the batch in flight finish. */
const STOP_TIMEOUT_MS = 30_000;
const SECRET_ENV = 'TX_OUTBOX_WEBHOOK_SECRET';

interface RelayCliOptions extends DatabaseOptions, LogLevelOptions {
  readonly nats?: string;
  readonly natsStream?: string;
  readonly natsSubjects?: string[];
  readonly webhook?: string;
  readonly webhookSecret?: string;
  readonly batchSize?: number;
  readonly pollInterval?: number;
  readonly lease?: number;
  readonly maxAttempts?: number;
  readonly relayId?: string;
  readonly listen: boolean;
}

/** Registers `tx-outbox relay`. */
export function registerRelay(program: Command): void {
  const command = program
    .command('relay')
    .description('publish committed outbox events to NATS JetStream or a webhook until SIGTERM/SIGINT')
    .option('--nats <url>', 'publish to NATS JetStream at this server URL (comma-separated for several)')
    .option('--nats-stream <name>', 'stream every message must land in (with --nats)')
    .option(
      '--nats-subjects <subjects>',
      'create --nats-stream with these comma-separated subjects if missing, e.g. "order.>,invoice.>"',
      commaList,
    )
    .option('--webhook <url>', 'POST each event to this http(s) URL, signed (Standard Webhooks)')
    .option('--webhook-secret <secret>', `signing secret for --webhook (default: env ${SECRET_ENV})`)
    .option('--batch-size <n>', 'events claimed per batch (default 500)', integerOption(1, 10_000))
    .option(
      '--poll-interval <ms>',
      'idle poll interval when no wake-up arrives (default 1000)',
      integerOption(1),
    )
    .option('--lease <ms>', 'partition lease length, renewed every third (default 15000)', integerOption(300))
    .option('--max-attempts <n>', 'attempts before an event is dead (default 10)', integerOption(1))
    .option('--relay-id <id>', 'unique id of this relay instance (default <host>-<pid>-<random>)')
    .option('--no-listen', 'do not LISTEN for NOTIFY wake-ups from producers; rely on polling');
  addDatabaseOptions(command);
  addLogLevelOption(command, 'info');
  command.action((options: RelayCliOptions) => runRelay(options));
}

function commaList(value: string): string[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

async function runRelay(options: RelayCliOptions): Promise<void> {
  checkPublisherOptions(options);
  const url = databaseUrl(options);
  const logger = createLogger(options.logLevel);
  const signals = watchSignals(logger);
  const pool = createPool(url, logger, 4);
  let publisher: Publisher | undefined;
  try {
    // Fails fast, with a hint to migrate, instead of a relay retrying forever against nothing.
    const status = await outboxStatus(pool, { schema: options.schema });
    publisher = await createPublisher(options);
    const relay = createRelay({
      pool,
      publisher,
      schema: options.schema,
      batchSize: options.batchSize,
      pollIntervalMs: options.pollInterval,
      leaseMs: options.lease,
      maxAttempts: options.maxAttempts,
      relayId: options.relayId,
      listen: options.listen,
      logger: logger.child({ component: 'relay' }),
    });
    const target = publisherTarget(options);
    await serve(relay, logger, signals.first, {
      schema: options.schema,
      publisher: target,
      pending: status.pending,
    });
  } finally {
    await publisher
      ?.close()
      .catch((error: unknown) => logger.warn({ err: error }, 'closing the publisher failed'));
    await pool.end();
    signals.dispose();
  }
}

function checkPublisherOptions(options: RelayCliOptions): void {
  if (options.nats !== undefined && options.webhook !== undefined) {
    throw usageError('choose one publisher: pass either --nats <url> or --webhook <url>, not both');
  }
  if (options.nats === undefined && options.webhook === undefined) {
    throw usageError('no publisher given: pass --nats <url> (NATS JetStream) or --webhook <url> (HTTP)');
  }
  if (options.webhook === undefined && options.webhookSecret !== undefined) {
    throw usageError('--webhook-secret needs --webhook <url>');
  }
  if (
    options.nats === undefined &&
    (options.natsStream !== undefined || options.natsSubjects !== undefined)
  ) {
    throw usageError('--nats-stream and --nats-subjects need --nats <url>');
  }
  if (options.natsSubjects !== undefined && options.natsStream === undefined) {
    throw usageError('--nats-subjects needs --nats-stream <name> (the stream they describe)');
  }
  if (options.natsSubjects?.length === 0)
    throw usageError('--nats-subjects is empty: list at least one subject');
}

async function createPublisher(options: RelayCliOptions): Promise<Publisher> {
  if (options.webhook !== undefined) return createWebhookPublisher(options.webhook, options.webhookSecret);
  const servers = commaList(options.nats ?? '');
  if (servers.length === 0)
    throw usageError('--nats is empty: pass a server URL such as nats://127.0.0.1:4222');
  const { natsPublisher } = await importNats();
  return natsPublisher({ servers, stream: options.natsStream, streamSubjects: options.natsSubjects });
}

function createWebhookPublisher(endpoint: string, flagSecret: string | undefined): Publisher {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    throw usageError(`--webhook: "${endpoint}" is not a URL; pass e.g. https://example.com/hooks/outbox`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw usageError(`--webhook: "${url.protocol}" URLs are not supported; pass an http: or https: URL`);
  }
  const secret = flagSecret ?? process.env[SECRET_ENV];
  if (secret === undefined || secret === '') {
    throw usageError(`--webhook needs a signing secret: pass --webhook-secret <secret> or set ${SECRET_ENV}`);
  }
  return webhookPublisher({ endpoints: endpoint, secret });
}

/** The NATS publisher lives behind optional peer dependencies: load it only when asked for. */
export async function importNats(): Promise<typeof import('../publishers/nats.js')> {
  try {
    return await import('../publishers/nats.js');
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'ERR_MODULE_NOT_FOUND') throw error;
    throw new CliError(
      '--nats needs the optional packages @nats-io/jetstream and @nats-io/transport-node: ' +
        'npm install @nats-io/jetstream@3.3 @nats-io/transport-node@3.3',
      1,
      { cause: error },
    );
  }
}

/** Where events go, safe to log: no credentials, no query string. */
function publisherTarget(options: RelayCliOptions): Record<string, string> {
  if (options.webhook !== undefined) {
    const url = new URL(options.webhook);
    return { type: 'webhook', url: `${url.origin}${url.pathname}` };
  }
  const servers = commaList(options.nats ?? '').map((s) => s.replace(/\/\/[^/@]*@/, '//***@'));
  return {
    type: 'nats',
    servers: servers.join(','),
    ...(options.natsStream ? { stream: options.natsStream } : {}),
  };
}

interface SignalWatch {
  /** Resolves with the first SIGTERM/SIGINT. */
  readonly first: Promise<NodeJS.Signals>;
  dispose(): void;
}

/** The first SIGTERM/SIGINT resolves `first`; a second one exits at once with 130. */
function watchSignals(logger: PinoLogger): SignalWatch {
  let received: NodeJS.Signals | undefined;
  let resolveFirst: (signal: NodeJS.Signals) => void = () => undefined;
  const first = new Promise<NodeJS.Signals>((resolve) => {
    resolveFirst = resolve;
  });
  const onSignal = (signal: NodeJS.Signals): void => {
    if (received !== undefined) {
      logger.warn({ signal }, 'second signal: exiting without waiting for the relay to stop');
      process.exit(EXIT_INTERRUPTED);
    }
    received = signal;
    logger.info({ signal, timeoutMs: STOP_TIMEOUT_MS }, 'stopping: finishing the batch in flight');
    resolveFirst(signal);
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  return {
    first,
    dispose: () => {
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
    },
  };
}

/** Runs the relay until the first signal, then stops it and logs a summary with its stats. */
async function serve(
  relay: Relay,
  logger: PinoLogger,
  signalled: Promise<NodeJS.Signals>,
  context: Record<string, unknown>,
): Promise<void> {
  const startedAt = Date.now();
  try {
    await relay.start();
    logger.info({ relayId: relay.id, ...context }, 'tx-outbox relay started');
    const signal = await signalled;
    await relay.stop({ timeout: STOP_TIMEOUT_MS });
    const uptimeSeconds = Math.round((Date.now() - startedAt) / 1000);
    logger.info({ relayId: relay.id, signal, uptimeSeconds, ...relay.stats() }, 'tx-outbox relay stopped');
  } finally {
    // Idempotent; also covers a failed start, so no lease or timer outlives this command.
    await relay.stop({ timeout: STOP_TIMEOUT_MS }).catch(() => undefined);
  }
}
