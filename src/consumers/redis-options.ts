/** Options of {@link consumeRedis}: the checks and the defaults, resolved once. */
import type { PoolClient } from 'pg';
import type { createClient, RedisClientOptions } from 'redis';
import { checkInboxAndHandler, checkIntegers, checkNames } from '../options/checks.js';
import {
  type ConsumerOptions,
  checkConsumerAddress,
  consumerDefaults,
  type ResolvedConsumerOptions,
} from './options.js';

export type RedisClient = ReturnType<typeof createClient>;

export interface RedisConsumerOptions<T = unknown, Tx = PoolClient> extends ConsumerOptions<T, Tx> {
  /** `redis[s]://…`; the adapter owns (and closes) its clients. */
  readonly url?: string;
  /**
   * An existing node-redis client instead of `url` (never closed by the adapter); it is
   * `duplicate()`d for the blocking reads.
   */
  readonly client?: RedisClient;
  readonly clientOptions?: Omit<RedisClientOptions, 'url'>;
  readonly stream: string;
  readonly group: string;
  /** This instance's name in the group: unique per running instance. */
  readonly consumerName: string;
  /** Where a group created here starts: `0` (the whole stream, default) or `$` (new entries only). */
  readonly startId?: string;
  /** BLOCK of each XREADGROUP, in ms. Default 1000. */
  readonly blockMs?: number;
  /** Pending entries idle longer than this are claimed again (deferred ones, those of dead consumers). Default 30 000. */
  readonly claimIdleMs?: number;
  /** How often XAUTOCLAIM runs, in ms. Default `claimIdleMs / 2` (at least 100). */
  readonly claimIntervalMs?: number;
}

type Defaulted = 'concurrency' | 'logger' | 'startId' | 'blockMs' | 'claimIdleMs' | 'claimIntervalMs';

export interface ResolvedRedisConsumerOptions<T = unknown, Tx = PoolClient>
  extends Omit<RedisConsumerOptions<T, Tx>, Defaulted>,
    ResolvedConsumerOptions<T, Tx> {
  readonly startId: string;
  readonly blockMs: number;
  readonly claimIdleMs: number;
  readonly claimIntervalMs: number;
}

/** Checked (errors name the option and the fix), defaults in. */
export function resolveRedisConsumerOptions<T, Tx>(
  options: RedisConsumerOptions<T, Tx>,
): ResolvedRedisConsumerOptions<T, Tx> {
  checkInboxAndHandler(options);
  checkConsumerAddress(options, options.url !== undefined && options.url !== '');
  checkNames(options, ['stream', 'group', 'consumerName']);
  checkIntegers(options, { concurrency: 1, blockMs: 1, claimIdleMs: 1, claimIntervalMs: 1 });
  const claimIdleMs = options.claimIdleMs ?? 30_000;
  return Object.freeze({
    ...options,
    ...consumerDefaults(options),
    startId: options.startId ?? '0',
    blockMs: options.blockMs ?? 1000,
    claimIdleMs,
    claimIntervalMs: options.claimIntervalMs ?? Math.max(100, Math.floor(claimIdleMs / 2)),
  });
}
