/** The options of the Redis Streams publisher, resolved once into a frozen object. */
import type { RedisArgument, RedisClientOptions } from 'redis';
import { ceSourceOption } from '../../envelope/ce-source.js';
import { OutboxValidationError } from '../../errors.js';
import { checkPositiveInteger, checkUrlOrClient } from '../../options/checks.js';
import { renamedOptions, secondsToMs } from '../../options/renamed.js';
import type { OutboxMessage } from '../contract.js';
import { defaultDestination, destinationOption } from '../core/destination.js';
import { type AppendRule, appendRule } from './wire.js';

/**
 * The part of a node-redis client (`createClient()` from `redis` 5.x) the publisher uses.
 * A single-node (or Sentinel-primary) client; Redis Cluster is not supported (see
 * `redisPublisher`).
 */
export interface RedisClientLike {
  readonly isOpen: boolean;
  readonly isReady: boolean;
  sendCommand(args: ReadonlyArray<RedisArgument>): Promise<unknown>;
  on(event: 'error', listener: (error: Error) => void): unknown;
  off(event: 'error', listener: (error: Error) => void): unknown;
}

/** Stream length cap applied by every `XADD` (`MAXLEN ~ count`, or `MAXLEN = count` when not approximate). */
export interface RedisMaxLen {
  readonly count: number;
  /** `~`: Redis trims whole macro nodes, much cheaper; the stream may hold a few more entries. Default true. */
  readonly approximate?: boolean;
}

/** Options of `redisPublisher`. Give `url` or an existing `client`. */
export interface RedisPublisherOptions {
  /** `redis[s]://[[user][:password]@]host[:port][/db]`. The publisher owns (and closes) this client. */
  readonly url?: string;
  /**
   * An existing, connected (or connecting) node-redis client to use instead of `url`; the
   * publisher never connects or closes it. Its offline queue is bypassed: while it is not
   * ready, publishes fail at once as `BROKER_UNAVAILABLE`.
   */
  readonly client?: RedisClientLike;
  /** Extra options for the client made from `url` (TLS, credentials, reconnect strategy …). */
  readonly clientOptions?: Omit<RedisClientOptions, 'url' | 'disableOfflineQueue'>;
  /** Stream key of a message. Default: `message.topic`, else `${aggregateType}.${type}`. */
  readonly destination?: (message: OutboxMessage) => string;
  /** @deprecated Use `destination`. */
  readonly stream?: (message: OutboxMessage) => string;
  /** Caps every stream this publisher appends to. Default: no trimming. */
  readonly maxLen?: RedisMaxLen;
  /**
   * How long, in ms, a republished event id is recognised and not appended again.
   * Default 86 400 000 (one day); 0 disables the guard (a plain `XADD`, no script, no guard keys).
   */
  readonly dedupWindowMs?: number;
  /** @deprecated Use `dedupWindowMs` (in ms: the seconds × 1000). */
  readonly dedupWindowSeconds?: number;
  /** Prefix of the guard keys: `<keyPrefix>:dedup:<eventId>`. Default `tx-outbox`. */
  readonly keyPrefix?: string;
  /**
   * CloudEvents `source` attribute of every event: a URI-reference (`https://orders.example.com`,
   * `urn:example:orders`, `/orders`), checked when the publisher is created. Default `tx-outbox`.
   */
  readonly ceSource?: string;
  /** @deprecated Use `ceSource`. */
  readonly source?: string;
  /** Deadline for connecting and for the replies of a batch, in ms. Default 10 000. */
  readonly timeoutMs?: number;
}

/** The options as the publisher uses them: checked, defaults applied, frozen. */
export interface ResolvedRedisOptions {
  /** Exactly one of `url` and `client` is set. */
  readonly url: string | undefined;
  readonly client: RedisClientLike | undefined;
  readonly clientOptions: Omit<RedisClientOptions, 'url' | 'disableOfflineQueue'> | undefined;
  readonly destination: (message: OutboxMessage) => string;
  readonly timeoutMs: number;
  /** How each message is appended (guard, trimming, envelope source). */
  readonly append: AppendRule;
}

export const DEFAULT_TIMEOUT_MS = 10_000;

/** Old spellings of the options (accepted with a DeprecationWarning). */
const RENAMED = {
  stream: 'destination',
  dedupWindowSeconds: secondsToMs('dedupWindowMs'),
  source: 'ceSource',
} as const;

/** Checks `options` (errors name the option and the fix) and applies the defaults. */
export function resolveRedisOptions(given: RedisPublisherOptions): ResolvedRedisOptions {
  const options = renamedOptions('redisPublisher', given, RENAMED);
  validate(options);
  const hasUrl = options.url !== undefined && options.url !== '';
  return Object.freeze({
    url: hasUrl ? options.url : undefined,
    client: options.client,
    clientOptions: options.clientOptions,
    destination: destinationOption(given, 'stream', options.destination, defaultDestination),
    timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    // The source checked first, so that an error names it as the caller spelled it.
    append: appendRule({ ...options, ceSource: ceSourceOption(given, options.ceSource) }),
  });
}

function validate(options: RedisPublisherOptions): void {
  const hasUrl = options.url !== undefined && options.url !== '';
  checkUrlOrClient({
    hasUrl,
    hasClient: options.client !== undefined,
    hasClientOptions: options.clientOptions !== undefined,
    urlExample: 'redis://host:port',
  });
  checkPositiveInteger('timeoutMs', options.timeoutMs);
  const window = options.dedupWindowMs;
  if (window !== undefined && !(Number.isInteger(window) && window >= 0)) {
    throw new OutboxValidationError(
      'dedupWindowMs',
      `must be a whole number of milliseconds >= 0, got ${window}`,
      'Use 0 to disable the guard',
    );
  }
  const maxLen = options.maxLen;
  if (maxLen !== undefined && !(Number.isInteger(maxLen.count) && maxLen.count > 0)) {
    throw new OutboxValidationError(
      'maxLen.count',
      `must be a positive integer, got ${maxLen.count}`,
      'Fix the option, or omit maxLen to keep every entry',
    );
  }
  if (options.keyPrefix !== undefined && options.keyPrefix === '') {
    throw new OutboxValidationError('keyPrefix', 'is empty', 'Omit it for the default `tx-outbox`');
  }
}
