/** Options of {@link consumeNats}: the vocabulary, the checks, the defaults, resolved once. */

import type { NatsConnection, NodeConnectionOptions } from '@nats-io/transport-node';
import type { PoolClient } from 'pg';
import { checkInboxAndHandler, checkIntegers, checkNames } from '../options/checks.js';
import { renamedOptions } from '../options/renamed.js';
import { type DeferPolicy, deferPolicy } from './defer.js';
import {
  type ConsumerOptions,
  checkConsumerAddress,
  consumerDefaults,
  type ResolvedConsumerOptions,
} from './options.js';

export interface NatsConsumerOptions<T = unknown, Tx = PoolClient> extends ConsumerOptions<T, Tx> {
  /** Server URL(s); the adapter owns (and closes) this connection. */
  readonly url?: string | string[];
  /** An existing connection instead of `url`; never closed by the adapter. */
  readonly client?: NatsConnection;
  /** Options of the connection made from `url`. */
  readonly clientOptions?: Omit<NodeConnectionOptions, 'servers'>;
  /** @deprecated Use `url`. */
  readonly servers?: string | string[];
  /** @deprecated Use `client`. */
  readonly connection?: NatsConnection;
  /** @deprecated Use `clientOptions`. */
  readonly connectionOptions?: Omit<NodeConnectionOptions, 'servers'>;
  /** The JetStream stream to consume (it must exist). */
  readonly stream: string;
  /** Durable consumer name: created, or updated to this configuration. */
  readonly durable: string;
  readonly filterSubject?: string;
  /** Redelivery delay of a deferred delivery, in ms; it doubles with each deferral in a row. Default 1000. */
  readonly deferMs?: number;
  /** Upper bound of that delay, in ms. Default 10 000. */
  readonly deferCapMs?: number;
  /** Ack wait of the durable consumer, in ms: an unacked delivery is redelivered after it. Default 30 000. */
  readonly ackWaitMs?: number;
}

export const NATS_CONSUMER_RENAMES = {
  servers: 'url',
  connection: 'client',
  connectionOptions: 'clientOptions',
} as const;

type Defaulted = 'concurrency' | 'logger' | 'deferMs' | 'deferCapMs' | 'ackWaitMs';

export interface ResolvedNatsConsumerOptions<T = unknown, Tx = PoolClient>
  extends Omit<NatsConsumerOptions<T, Tx>, Defaulted | keyof typeof NATS_CONSUMER_RENAMES>,
    ResolvedConsumerOptions<T, Tx> {
  readonly defer: DeferPolicy;
  readonly ackWaitMs: number;
}

/** Old spellings renamed (warning once), checked (errors name the option and the fix), defaults in. */
export function resolveNatsConsumerOptions<T, Tx>(
  given: NatsConsumerOptions<T, Tx>,
): ResolvedNatsConsumerOptions<T, Tx> {
  const options = renamedOptions('consumeNats', given, NATS_CONSUMER_RENAMES);
  checkInboxAndHandler(options);
  checkConsumerAddress(options, options.url !== undefined && options.url.length > 0);
  checkNames(options, ['stream', 'durable']);
  checkIntegers(options, { concurrency: 1, deferMs: 0, deferCapMs: 0, ackWaitMs: 1 });
  return Object.freeze({
    ...options,
    ...consumerDefaults(options),
    defer: deferPolicy(options),
    ackWaitMs: options.ackWaitMs ?? 30_000,
  });
}
