/**
 * `tx-outbox relay`: runs a relay as its own service until SIGTERM or SIGINT: the polling
 * relay, or with `--source cdc` the CDC relay (logical replication). The first signal drains the batch in flight (up to 30 s) and gives
 * the partitions back; a second one exits at once with 130.
 */

import type { Command } from 'commander';
import type { Logger as PinoLogger } from 'pino';
import type { MetricsServer } from '../ops/http.js';
import type { Publisher } from '../publishers/contract.js';
import { redactUrl } from '../redact.js';
import type { HistoryOptions } from '../relay/history.js';
import type { RelayOptions } from '../relay/options.js';
import { createRelay, type Relay } from '../relay/polling/relay.js';
import type { RelayPruneOptions } from '../relay/pruner.js';
import { warnSecretsOnCommandLine } from './argv-secrets.js';
import { DEFAULT_SLOT_HELP } from './cdc.js';
import { withDatabaseOptions } from './command.js';
import {
  createLogger,
  createPool,
  databaseUrl,
  EXIT_INTERRUPTED,
  integerOption,
  nonEmptyOption,
  usageError,
} from './common.js';
import { CONFIG_FILES } from './config.js';
import { durationOption, parseDuration, TIMER } from './duration.js';
import { addMetricsOptions, metricsEndpoint, relayRegistry, serveRelayMetrics } from './metrics-endpoint.js';
import { publisherFromConfig, publisherFromSpec } from './publishers.js';
import { startCdcRelay } from './relay-cdc.js';
import { commaList, type RelayCliOptions } from './relay-flags.js';
import { choosePublishers, describe, type PublisherChoice } from './relay-publishers.js';
import { waitForDatabase } from './wait-for-database.js';
import { WEBHOOK_SECRET_ENV, webhookSecretFromFlags } from './webhook-secret.js';

/** How long the first SIGTERM/SIGINT lets the batch in flight finish. */
const STOP_TIMEOUT_MS = 30_000;

/** Registers `tx-outbox relay`. */
export function registerRelay(program: Command): void {
  const command = program
    .command('relay')
    .description(
      'publish committed outbox events to NATS JetStream, Kafka, RabbitMQ, Redis Streams, MQTT or a webhook until SIGTERM/SIGINT',
    )
    .option('--nats <url>', 'publish to NATS JetStream at this server URL (comma-separated for several)')
    .option('--nats-stream <name>', 'stream every message must land in (with --nats)')
    .option(
      '--nats-subjects <subjects>',
      'create --nats-stream with these comma-separated subjects if missing, e.g. "order.>,invoice.>"',
      commaList,
    )
    .option('--webhook <url>', 'POST each event to this http(s) URL, signed (Standard Webhooks)')
    .option(
      '--webhook-secret-file <path>',
      `file holding the signing secret for --webhook (default: env ${WEBHOOK_SECRET_ENV})`,
    )
    .option(
      '--webhook-secret <secret>',
      'signing secret on the command line (visible in `ps`: prefer the above)',
    )
    .option('--kafka <brokers>', 'publish to Kafka: comma-separated bootstrap brokers, e.g. 127.0.0.1:9092')
    .option('--rabbitmq <url>', 'publish to RabbitMQ, e.g. amqp://guest:guest@127.0.0.1:5672')
    .option('--rabbitmq-exchange <name>', 'exchange for --rabbitmq (default tx-outbox)')
    .option('--redis <url>', 'append to Redis Streams, e.g. redis://127.0.0.1:6379')
    .option('--mqtt <url>', 'publish to an MQTT broker (QoS 1), e.g. mqtt://127.0.0.1:1883')
    .option(
      '--config <file>',
      `publishers and routing rules (default: the first of ${CONFIG_FILES.join(', ')} in this directory)`,
    )
    .option(
      '--source <poll|cdc>',
      'where events come from: poll (default) claims them from the events table; cdc streams them by logical replication (needs wal_level = logical)',
    )
    .option(
      '--ce-source <uri>',
      "CloudEvents source of the events, a URI-reference such as https://orders.example.com (default 'tx-outbox')",
    )
    .option(
      '--slot <name>',
      `with --source cdc: replication slot (default ${DEFAULT_SLOT_HELP})`,
      nonEmptyOption,
    )
    .option('--publication <name>', 'with --source cdc: publication (default txo_<schema>)', nonEmptyOption)
    .option(
      '--heartbeat <duration>',
      'with --source cdc: between heartbeat messages that keep the slot moving (default 10s)',
    )
    .option(
      '--silence-timeout <duration>',
      'with --source cdc: reconnect when the stream says nothing for this long (default 30s, more than --heartbeat)',
    )
    .option(
      '--accept-wal-format-1',
      'with --source cdc: also publish WAL-mode events of format 1 (no MAC) written after migration 12, while producers of an older tx-outbox still run; meanwhile any database login can publish events (docs/cdc.md)',
    )
    .option('--batch-size <n>', 'events claimed per batch (default 500)', integerOption(1, 10_000))
    .option(
      '--poll-interval <duration>',
      'idle poll interval when no wake-up arrives, e.g. 500ms (default 1s; a bare number is ms)',
      durationOption(TIMER),
    )
    .option(
      '--lease <duration>',
      'partition lease length, renewed every third (default 15s, at least 300ms)',
      durationOption({ ...TIMER, min: 300 }),
    )
    .option('--max-attempts <n>', 'attempts before an event is dead (default 10)', integerOption(1))
    .option(
      '--gap-grace <duration>',
      'how long an aggregate waits behind a missing sequence before the relay publishes across it, if nothing earlier is left (default 10s)',
      durationOption(TIMER),
    )
    .option(
      '--relay-id <id>',
      'unique id of this relay instance (default <host>-<pid>-<random>)',
      nonEmptyOption,
    )
    .option('--no-listen', 'do not LISTEN for NOTIFY wake-ups from producers; rely on polling')
    .option('--history', 'keep a delivery history (for `tx-outbox event <id>`)')
    .option(
      '--history-days <n>',
      'days of delivery history kept (default 7; implies --history)',
      integerOption(1, 3650),
    )
    .option('--history-payloads', 'keep payloads in the delivery history too (implies --history)')
    .option(
      '--prune',
      "prune the outbox's own tables in the background with the default retentions (see tx-outbox prune)",
    )
    .option('--prune-interval <duration>', 'with --prune: between runs (default 10m)');
  addMetricsOptions(command);
  withDatabaseOptions(command, 'info');
  command.action((options: RelayCliOptions) => runRelay(options));
}

function relayPruneFlag(interval: string | undefined): RelayPruneOptions | true {
  return interval === undefined ? true : { intervalMs: parseDuration('--prune-interval', interval, TIMER) };
}

/** `--source poll|cdc` picks the relay; any other value is the CloudEvents source (deprecated). */
type RelayKind = 'poll' | 'cdc';
const RELAY_KINDS: ReadonlySet<string> = new Set(['poll', 'cdc']);

/**
 * The relay kind and the CloudEvents source, from `--source` and `--ce-source`. `--source` was the
 * CloudEvents source until the CDC relay; a value other than poll or cdc still means that, with a
 * deprecation warning (after it is known to be valid, so bad usage stays one error line).
 */
export function relaySourceFlags(options: { readonly source?: string; readonly ceSource?: string }): {
  kind: RelayKind;
  ceSource?: string;
  ceSourceFlag?: string;
  deprecated: boolean;
} {
  const { ceSource } = options;
  // `CDC`, ` cdc`: a typo of the relay kind, never a CloudEvents source (that would start a polling
  // relay next to the CDC relays of the schema).
  const normalized = options.source?.trim().toLowerCase();
  const source = normalized !== undefined && RELAY_KINDS.has(normalized) ? normalized : options.source;
  if (source === undefined || RELAY_KINDS.has(source)) {
    const kind = (source ?? 'poll') as RelayKind;
    return ceSource === undefined
      ? { kind, deprecated: false }
      : { kind, ceSource, ceSourceFlag: '--ce-source', deprecated: false };
  }
  if (ceSource !== undefined) {
    throw usageError(
      `--source ${JSON.stringify(source)} is the deprecated spelling of --ce-source, which is given too; keep --ce-source only (--source now takes poll or cdc)`,
    );
  }
  // The deprecated CloudEvents spelling only for what looks like a URI-reference: a scheme or a path.
  if (!/^[a-z][a-z0-9+.-]*:/i.test(source) && !source.includes('/')) {
    throw usageError(
      `--source ${JSON.stringify(source)} is neither poll nor cdc; a CloudEvents source (a URI with a scheme or a path) goes in --ce-source`,
    );
  }
  return { kind: 'poll', ceSource: source, ceSourceFlag: '--source', deprecated: true };
}

/** Rejects CDC-only flags on a polling relay (they would be ignored silently otherwise). */
function checkCdcFlags(options: RelayCliOptions, kind: RelayKind): void {
  if (kind === 'cdc') return;
  const given = (
    [
      ['--slot', options.slot],
      ['--publication', options.publication],
      ['--heartbeat', options.heartbeat],
      ['--silence-timeout', options.silenceTimeout],
      ['--accept-wal-format-1', options.acceptWalFormat1],
    ] as const
  ).filter(([, v]) => v !== undefined);
  if (given.length > 0) throw usageError(`${given.map(([f]) => f).join(', ')} need --source cdc`);
}

/** The CDC settings from the flags; the defaults are the CDC relay's own. */
export function cdcFlags(options: {
  readonly slot?: string;
  readonly publication?: string;
  readonly heartbeat?: string;
  readonly silenceTimeout?: string;
  readonly acceptWalFormat1?: boolean;
}): {
  slot?: string;
  publication?: string;
  heartbeatMs?: number;
  silenceTimeoutMs?: number;
  acceptWalFormat1?: boolean;
} {
  const heartbeatMs =
    options.heartbeat === undefined ? undefined : parseDuration('--heartbeat', options.heartbeat, TIMER);
  const silenceTimeoutMs =
    options.silenceTimeout === undefined
      ? undefined
      : parseDuration('--silence-timeout', options.silenceTimeout, TIMER);
  if ((silenceTimeoutMs ?? 30_000) <= (heartbeatMs ?? 10_000)) {
    throw usageError(
      `--silence-timeout (${silenceTimeoutMs ?? 30_000} ms) must be longer than --heartbeat (${heartbeatMs ?? 10_000} ms): the heartbeat is what breaks the silence`,
    );
  }
  return {
    ...(options.slot === undefined ? {} : { slot: options.slot }),
    ...(options.publication === undefined ? {} : { publication: options.publication }),
    ...(heartbeatMs === undefined ? {} : { heartbeatMs }),
    ...(silenceTimeoutMs === undefined ? {} : { silenceTimeoutMs }),
    ...(options.acceptWalFormat1 ? { acceptWalFormat1: true } : {}),
  };
}

async function runRelay(options: RelayCliOptions): Promise<void> {
  const flags = relaySourceFlags(options);
  checkCdcFlags(options, flags.kind);
  const cdc = flags.kind === 'cdc' ? cdcFlags(options) : undefined;
  const chosen = await choosePublishers(options, flags);
  if (flags.deprecated) {
    process.emitWarning(
      '--source <uri> for the CloudEvents source is deprecated, use --ce-source <uri> (--source now takes poll or cdc; the old meaning goes in the next minor version)',
      { type: 'DeprecationWarning', code: 'TXO_DEPRECATED_OPTION' },
    );
  }
  const url = databaseUrl(options);
  const logger = createLogger(options.logLevel);
  // --database-url is checked for every command (common.ts, addDatabaseOptions).
  warnSecretsOnCommandLine(
    {
      '--nats': options.nats,
      '--webhook': options.webhook,
      '--rabbitmq': options.rabbitmq,
      '--redis': options.redis,
      '--mqtt': options.mqtt,
    },
    logger,
  );
  const secret = webhookSecretFromFlags(options, logger);
  const signals = watchSignals(logger);
  const stopped = new AbortController();
  void signals.first.then(() => stopped.abort());
  const endpoint = metricsEndpoint(
    options,
    chosen.kind === 'config' ? { file: chosen.file, metrics: chosen.config.metrics } : undefined,
  );
  // One connection more for the readiness check of /readyz.
  // One more for the background pruner's run (--prune), one for the CDC relay's heartbeat and
  // polling path (its stream has a replication connection of its own, outside the pool).
  const pool = createPool(
    url,
    logger,
    (endpoint === undefined ? 5 : 6) + (options.prune ? 1 : 0) + (cdc === undefined ? 0 : 1),
  );
  const registry = endpoint === undefined ? undefined : relayRegistry();
  let publisher: Publisher | undefined;
  let metrics: MetricsServer | undefined;
  try {
    // Waits for a database that is still starting; fails fast, with a hint to migrate, on a
    // missing schema instead of a relay retrying forever against nothing.
    const status = await waitForDatabase(url, options.schema, redactUrl(url), logger, stopped.signal);
    if (status === undefined) return; // stopped by a signal before the database came up
    publisher =
      chosen.kind === 'config'
        ? await publisherFromConfig(chosen.config, secret)
        : await publisherFromSpec(chosen.spec, secret);
    const relayOptions: RelayOptions = {
      pool,
      publisher,
      schema: options.schema,
      batchSize: options.batchSize,
      pollIntervalMs: options.pollInterval,
      leaseMs: options.lease,
      maxAttempts: options.maxAttempts,
      gapGraceMs: options.gapGrace,
      relayId: options.relayId,
      listen: options.listen,
      history: historyOption(options, chosen),
      ...(options.prune ? { prune: relayPruneFlag(options.pruneInterval) } : {}),
      logger: logger.child({ component: 'relay' }),
      ...(registry === undefined ? {} : { metrics: registry }),
    };
    const relay =
      cdc === undefined
        ? createRelay(relayOptions)
        : await startCdcRelay({ ...relayOptions, ...cdc, logger: logger.child({ component: 'cdc-relay' }) });
    if (endpoint !== undefined && registry !== undefined) {
      metrics = await serveRelayMetrics(endpoint, { pool, relay, registry, logger });
    }
    await serve(relay, logger, signals.first, {
      schema: options.schema,
      source: flags.kind,
      // The default slot is resolved by the relay's start: its "CDC relay started" line names it.
      ...(cdc?.slot === undefined ? {} : { slot: cdc.slot }),
      publisher:
        chosen.kind === 'config' ? { config: chosen.file, publisher: publisher.name } : describe(chosen.spec),
      pending: status.pending,
    });
  } finally {
    await metrics?.close();
    await publisher
      ?.close()
      .catch((error: unknown) => logger.warn({ err: error }, 'closing the publisher failed'));
    await pool.end();
    signals.dispose();
  }
}

/** The flags win over the config file's `history`; any history flag turns it on. */
function historyOption(options: RelayCliOptions, chosen: PublisherChoice): HistoryOptions | undefined {
  const file = chosen.kind === 'config' ? chosen.config.history : undefined;
  if (!options.history && options.historyDays === undefined && !options.historyPayloads && !file)
    return undefined;
  return {
    ...file,
    ...(options.historyDays === undefined ? {} : { retentionDays: options.historyDays }),
    ...(options.historyPayloads ? { payloads: true } : {}),
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
