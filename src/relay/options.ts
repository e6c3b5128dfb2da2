import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Pool } from 'pg';
import { OutboxValidationError } from '../errors.js';
import { type Logger, silentLogger } from '../logger.js';
import { NOOP_RELAY_METRICS, type RelayMetrics, SinkRelayMetrics } from '../metrics/relay-metrics.js';
import { type MetricsOption, resolveMetrics } from '../metrics/resolve.js';
import type { MetricsSink } from '../metrics/sink.js';
import type { Publisher } from '../publishers/contract.js';
import { publisherKind } from '../publishers/kind.js';
import { quoteSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import type { BackoffPolicy } from './backoff.js';
import { type HistoryOptions, type ResolvedHistory, resolveHistory } from './history.js';
import { type RelayPruneOptions, type ResolvedRelayPrune, resolveRelayPrune } from './pruner.js';

export interface RelayOptions {
  /**
   * Pool for the outbox database. The relay keeps three of its connections (claims, outcomes,
   * LISTEN; two with `listen: false`) and borrows one more for lease renewals: `max` ≥ 4.
   */
  readonly pool: Pool;
  readonly publisher: Publisher;
  /**
   * `stop()` closes the publisher once the batch in flight is done (default true): the relay
   * owns it, and a stopped relay leaves nothing that keeps the process alive. Pass false for a
   * publisher you share (several relays, your own publishes) and close yourself.
   */
  readonly closePublisher?: boolean;
  /** Outbox schema. Default `outbox`. */
  readonly schema?: string;
  /** Events claimed per batch. Default 500. */
  readonly batchSize?: number;
  /** Idle poll interval when no wake-up arrives, ms. Default 1000. */
  readonly pollIntervalMs?: number;
  /** Partition lease length, ms; renewed every third of it. Default 15000. */
  readonly leaseMs?: number;
  /** Attempts before an event is dead. Default 10. */
  readonly maxAttempts?: number;
  /**
   * How long an aggregate's next event may wait behind a missing sequence before the relay looks
   * for an earlier event of it and, finding none, publishes across the gap, ms. Gaps come from
   * caller versions (`enqueue({ sequence })`) that skip one, an aggregate adopted at a later
   * version, a row deleted by hand (docs/guarantees.md, Caller versions). Default 10000.
   */
  readonly gapGraceMs?: number;
  /** Retry delays: exponential with full jitter. Default { baseMs: 1000, capMs: 300000 }. */
  readonly backoff?: Partial<BackoffPolicy>;
  /** A publish call not finished by then is aborted (its events retried). Default 60000. */
  readonly publishTimeoutMs?: number;
  /**
   * While the broker is unreachable the relay logs the first refused batch at once, then a
   * reminder at most this often (how long, how many batches), then the recovery. Default 30000.
   */
  readonly outageReminderMs?: number;
  /** LISTEN for producers' NOTIFY wake-ups. Default true. */
  readonly listen?: boolean;
  /**
   * `off` (default) for the relay's own outcome commits: a lost outcome after a
   * server crash only means a republish, which at-least-once allows.
   */
  readonly synchronousCommit?: 'on' | 'off';
  /** Unique id of this relay instance. Default `<host>-<pid>-<random>`. */
  readonly relayId?: string;
  readonly logger?: Logger;
  /** Stops the relay when aborted. */
  readonly signal?: AbortSignal;
  /** Random source for jitter (tests). */
  readonly random?: () => number;
  /**
   * Keep a delivery history (off by default): every delivered event's identity and timing in
   * the `deliveries` table, for `tx-outbox event <id>`; `true` or { retentionDays, payloads }.
   */
  readonly history?: boolean | HistoryOptions;
  /**
   * Prune the schema in the background (docs/schema.md, Bounded tables): `true` for the
   * defaults, or retentions and `intervalMs` (default 10 minutes). Off by default. A run borrows
   * one more connection of `pool`.
   */
  readonly prune?: RelayPruneOptions | boolean;
  /**
   * How often the relay publishes the backlog for `enqueue({ maxPending })` into the `backlog`
   * table (one O(partitions) read and one tiny upsert), ms. Default 5000.
   */
  readonly backlogIntervalMs?: number;
  /**
   * Where the relay's metrics go (docs/metrics.md): a prom-client `Registry`, an OpenTelemetry
   * `{ meter }`, or `'otel'` for the global meter provider. Default: none, nothing recorded.
   */
  readonly metrics?: MetricsOption;
}

export interface ResolvedRelayOptions {
  readonly pool: Pool;
  readonly publisher: Publisher;
  readonly closePublisher: boolean;
  readonly schema: string;
  readonly quotedSchema: string;
  readonly batchSize: number;
  readonly pollIntervalMs: number;
  readonly leaseMs: number;
  readonly maxAttempts: number;
  readonly gapGraceMs: number;
  readonly backoff: BackoffPolicy;
  readonly publishTimeoutMs: number;
  readonly outageReminderMs: number;
  readonly listen: boolean;
  readonly synchronousCommit: 'on' | 'off';
  readonly relayId: string;
  readonly logger: Logger;
  readonly signal: AbortSignal | undefined;
  readonly random: () => number;
  readonly history: ResolvedHistory | undefined;
  readonly prune: ResolvedRelayPrune | undefined;
  readonly backlogIntervalMs: number;
  /** The `metrics` option as given: the backlog gauges take their own sink (label `schema` only). */
  readonly metricsOption: MetricsOption | undefined;
  /** The metrics sink, constant labels `schema` and `publisher` (the no-op sink by default). */
  readonly metricsSink: MetricsSink;
  readonly metrics: RelayMetrics;
}

function positiveInt(value: number | undefined, fallback: number, field: string, max = 2 ** 31 - 1): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < 1 || v > max) {
    throw new OutboxValidationError(
      field,
      `is ${String(v)}`,
      `Pass an integer from 1 to ${max} (default ${fallback}).`,
    );
  }
  return v;
}

/** Defaults applied and validated in one place; the result is frozen. */
export function resolveRelayOptions(options: RelayOptions): ResolvedRelayOptions {
  if (!options || typeof options.pool?.connect !== 'function') {
    throw new OutboxValidationError('pool', 'is missing', 'Pass a pg Pool connected to the outbox database.');
  }
  if (!options.publisher || typeof options.publisher.publish !== 'function') {
    throw new OutboxValidationError(
      'publisher',
      'is missing',
      'Pass a publisher, e.g. natsPublisher({ url }).',
    );
  }
  const listen = options.listen ?? true;
  const closePublisher = options.closePublisher ?? true;
  if (typeof closePublisher !== 'boolean') {
    throw new OutboxValidationError(
      'closePublisher',
      `is ${String(closePublisher)}`,
      'Pass true (stop() closes the publisher) or false (you close it).',
    );
  }
  const poolMax = (options.pool as { options?: { max?: unknown } }).options?.max;
  const needed = listen ? 4 : 3;
  if (typeof poolMax === 'number' && poolMax < needed) {
    throw new OutboxValidationError(
      'pool',
      `allows ${poolMax} connections, fewer than the relay needs`,
      `The relay keeps ${needed - 1} (claims, outcomes${listen ? ', LISTEN' : ''}) and borrows one for leases: give it max ≥ ${needed}.`,
    );
  }
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const leaseMs = positiveInt(options.leaseMs, 15_000, 'leaseMs');
  if (leaseMs < 300) {
    throw new OutboxValidationError(
      'leaseMs',
      `is ${leaseMs}`,
      'Use at least 300 ms; it is renewed every third.',
    );
  }
  const baseMs = positiveInt(options.backoff?.baseMs, 1000, 'backoff.baseMs');
  const capMs = positiveInt(options.backoff?.capMs, 300_000, 'backoff.capMs');
  const synchronousCommit = options.synchronousCommit ?? 'off';
  if (synchronousCommit !== 'on' && synchronousCommit !== 'off') {
    throw new OutboxValidationError(
      'synchronousCommit',
      `is ${String(synchronousCommit)}`,
      "Pass 'on' or 'off'.",
    );
  }
  if (
    options.relayId !== undefined &&
    (typeof options.relayId !== 'string' || options.relayId.trim() === '')
  ) {
    throw new OutboxValidationError(
      'relayId',
      `is ${JSON.stringify(options.relayId)}`,
      'Pass a non-empty id unique to this relay instance, or omit it for <host>-<pid>-<random>.',
    );
  }
  const logger = options.logger ?? silentLogger;
  const metricsSink = resolveMetrics(options.metrics, { schema, publisher: options.publisher.name }, logger);
  return Object.freeze({
    pool: options.pool,
    publisher: options.publisher,
    closePublisher,
    schema,
    quotedSchema: quoteSchema(schema),
    batchSize: positiveInt(options.batchSize, 500, 'batchSize', 10_000),
    pollIntervalMs: positiveInt(options.pollIntervalMs, 1000, 'pollIntervalMs'),
    leaseMs,
    maxAttempts: positiveInt(options.maxAttempts, 10, 'maxAttempts'),
    gapGraceMs: positiveInt(options.gapGraceMs, 10_000, 'gapGraceMs'),
    backoff: Object.freeze({ baseMs, capMs: Math.max(capMs, baseMs) }),
    publishTimeoutMs: positiveInt(options.publishTimeoutMs, 60_000, 'publishTimeoutMs'),
    outageReminderMs: positiveInt(options.outageReminderMs, 30_000, 'outageReminderMs'),
    listen,
    synchronousCommit,
    relayId: options.relayId ?? `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`,
    logger,
    signal: options.signal,
    random: options.random ?? Math.random,
    history: resolveHistory(options.history),
    prune: resolveRelayPrune(options.prune, schema),
    backlogIntervalMs: positiveInt(options.backlogIntervalMs, 5000, 'backlogIntervalMs'),
    metricsOption: options.metrics,
    metricsSink,
    metrics: metricsSink.enabled
      ? new SinkRelayMetrics(metricsSink, publisherKind(options.publisher))
      : NOOP_RELAY_METRICS,
  });
}
