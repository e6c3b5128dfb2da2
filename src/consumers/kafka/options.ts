/** Options of {@link consumeKafka}: the vocabulary, the checks, the defaults, resolved once. */
import type { PoolClient } from 'pg';
import { OutboxValidationError } from '../../errors.js';
import { checkInboxAndHandler, checkIntegers, checkNames } from '../../options/checks.js';
import { renamedOptions } from '../../options/renamed.js';
import { type DeferPolicy, deferPolicy } from '../defer.js';
import { type ConsumerOptions, consumerDefaults, type ResolvedConsumerOptions } from '../options.js';

export interface KafkaConsumerOptions<T = unknown, Tx = PoolClient> extends ConsumerOptions<T, Tx> {
  /** Bootstrap brokers, `host:port` (one, or several). The adapter owns (and closes) its client. */
  readonly url?: string | readonly string[];
  /** @deprecated Use `url`. */
  readonly brokers?: readonly string[];
  readonly topic: string;
  /** Consumer group: its committed offsets say where to resume. */
  readonly group?: string;
  /** @deprecated Use `group`. */
  readonly groupId?: string;
  /** Client id shown in broker logs. Default `tx-outbox`. */
  readonly clientId?: string;
  /** Delay before a deferred record is handled again, in ms; it doubles with each deferral in a row. Default 1000. */
  readonly deferMs?: number;
  /** Upper bound of that delay, in ms. Default 10 000. */
  readonly deferCapMs?: number;
  /**
   * Deferred records held in process at once, each waiting its delay (they take no handling
   * slot, so independent aggregates keep flowing); beyond it, reading pauses. Default 1000.
   */
  readonly maxDeferred?: number;
  /**
   * How long the group waits for a silent member (crashed, frozen) before its partitions go to
   * the others: a redelivery after a crash waits this long. Kafka's broker bounds it (by default
   * 6 000 to 300 000 ms). Default 30 000 (the client library's own default is 60 000).
   */
  readonly sessionTimeoutMs?: number;
  /** Heartbeats to the group coordinator, ms; well below `sessionTimeoutMs`. Default a sixth of it. */
  readonly heartbeatIntervalMs?: number;
  /** How long a rebalance waits for members to rejoin, ms. Default 60 000. */
  readonly rebalanceTimeoutMs?: number;
}

export const KAFKA_CONSUMER_RENAMES = { brokers: 'url', groupId: 'group' } as const;

type Defaulted =
  | 'concurrency'
  | 'logger'
  | 'url'
  | 'group'
  | 'clientId'
  | 'deferMs'
  | 'deferCapMs'
  | 'maxDeferred'
  | 'sessionTimeoutMs'
  | 'heartbeatIntervalMs'
  | 'rebalanceTimeoutMs';

export interface ResolvedKafkaConsumerOptions<T = unknown, Tx = PoolClient>
  extends Omit<KafkaConsumerOptions<T, Tx>, Defaulted | keyof typeof KAFKA_CONSUMER_RENAMES>,
    ResolvedConsumerOptions<T, Tx> {
  readonly url: readonly string[];
  readonly group: string;
  readonly clientId: string;
  readonly defer: DeferPolicy;
  readonly maxDeferred: number;
  readonly sessionTimeoutMs: number;
  readonly heartbeatIntervalMs: number;
  readonly rebalanceTimeoutMs: number;
}

/** Old spellings renamed (warning once), checked (errors name the option and the fix), defaults in. */
export function resolveKafkaConsumerOptions<T, Tx>(
  given: KafkaConsumerOptions<T, Tx>,
): ResolvedKafkaConsumerOptions<T, Tx> {
  const options = renamedOptions('consumeKafka', given, KAFKA_CONSUMER_RENAMES);
  checkInboxAndHandler(options);
  const url = typeof options.url === 'string' && options.url !== '' ? [options.url] : options.url;
  if (!Array.isArray(url) || url.length === 0)
    throw new OutboxValidationError('url', 'is missing', 'Give at least one host:port.');
  checkNames(options, ['topic', 'group']);
  checkIntegers(options, {
    concurrency: 1,
    deferMs: 0,
    deferCapMs: 0,
    maxDeferred: 1,
    sessionTimeoutMs: 1,
    heartbeatIntervalMs: 1,
    rebalanceTimeoutMs: 1,
  });
  const sessionTimeoutMs = options.sessionTimeoutMs ?? 30_000;
  if (options.heartbeatIntervalMs !== undefined && options.heartbeatIntervalMs >= sessionTimeoutMs)
    throw new OutboxValidationError(
      'heartbeatIntervalMs',
      `is ${options.heartbeatIntervalMs}, not below sessionTimeoutMs (${sessionTimeoutMs})`,
      'Use a third of sessionTimeoutMs or less.',
    );
  return Object.freeze({
    ...options,
    ...consumerDefaults(options),
    url: Object.freeze([...url]),
    group: options.group!,
    clientId: options.clientId ?? 'tx-outbox',
    defer: deferPolicy(options),
    maxDeferred: options.maxDeferred ?? 1000,
    sessionTimeoutMs,
    heartbeatIntervalMs: options.heartbeatIntervalMs ?? Math.floor(sessionTimeoutMs / 6),
    rebalanceTimeoutMs: options.rebalanceTimeoutMs ?? 60_000,
  });
}
