/** Options of {@link consumeRabbitMq}: the vocabulary, the checks, the defaults, resolved once. */

import type { Options, SocketOptions } from 'amqplib';
import type { PoolClient } from 'pg';
import { checkInboxAndHandler, checkIntegers, checkNames } from '../options/checks.js';
import { renamedOptions } from '../options/renamed.js';
import type { AmqpConnection } from '../publishers/rabbitmq/index.js';
import {
  type ConsumerOptions,
  checkConsumerAddress,
  consumerDefaults,
  type ResolvedConsumerOptions,
} from './options.js';

export interface RabbitMqConsumerOptions<T = unknown, Tx = PoolClient> extends ConsumerOptions<T, Tx> {
  /** Broker URL or amqplib connect object; the adapter owns (and closes) this connection. */
  readonly url?: string | Options.Connect;
  /** amqplib socket options of the connections made from `url`. */
  readonly clientOptions?: SocketOptions;
  /** An existing connection instead of `url`: the adapter opens (and closes) its own channel on it, never the connection. */
  readonly client?: AmqpConnection;
  /** @deprecated Use `clientOptions`. */
  readonly socketOptions?: SocketOptions;
  /** @deprecated Use `client`. */
  readonly connection?: AmqpConnection;
  /** The queue to consume (it must exist). */
  readonly queue: string;
  /** Unacknowledged deliveries the broker sends at once. Default 32. */
  readonly prefetch?: number;
  /** Delay before a deferred delivery is requeued, in ms. Default 1000. */
  readonly deferMs?: number;
}

export const RABBITMQ_CONSUMER_RENAMES = { connection: 'client', socketOptions: 'clientOptions' } as const;

type Defaulted = 'concurrency' | 'logger' | 'prefetch' | 'deferMs';

export interface ResolvedRabbitMqConsumerOptions<T = unknown, Tx = PoolClient>
  extends Omit<RabbitMqConsumerOptions<T, Tx>, Defaulted | keyof typeof RABBITMQ_CONSUMER_RENAMES>,
    ResolvedConsumerOptions<T, Tx> {
  readonly prefetch: number;
  readonly deferMs: number;
}

/** Old spellings renamed (warning once), checked (errors name the option and the fix), defaults in. */
export function resolveRabbitMqConsumerOptions<T, Tx>(
  given: RabbitMqConsumerOptions<T, Tx>,
): ResolvedRabbitMqConsumerOptions<T, Tx> {
  const options = renamedOptions('consumeRabbitMq', given, RABBITMQ_CONSUMER_RENAMES);
  checkInboxAndHandler(options);
  checkConsumerAddress(options, options.url !== undefined && options.url !== '');
  checkNames(options, ['queue']);
  checkIntegers(options, { prefetch: 1, concurrency: 1, deferMs: 0 });
  return Object.freeze({
    ...options,
    ...consumerDefaults(options),
    prefetch: options.prefetch ?? 32,
    deferMs: options.deferMs ?? 1000,
  });
}
