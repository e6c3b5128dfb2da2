/** Options of {@link consumeMqtt}: the checks and the defaults, resolved once. */

import type { IClientOptions, MqttClient } from 'mqtt';
import type { PoolClient } from 'pg';
import { OutboxValidationError } from '../errors.js';
import { checkInboxAndHandler, checkIntegers, checkNames } from '../options/checks.js';
import { type DeferPolicy, deferPolicy } from './defer.js';
import {
  type ConsumerOptions,
  checkConsumerAddress,
  consumerDefaults,
  type ResolvedConsumerOptions,
} from './options.js';

/** Extra MQTT.js options for the client made from `url` (auth, TLS …). */
export type MqttClientOptions = Omit<
  IClientOptions,
  'protocolVersion' | 'clean' | 'clientId' | 'customHandleAcks'
>;

export interface MqttConsumerOptions<T = unknown, Tx = PoolClient> extends ConsumerOptions<T, Tx> {
  /** Broker URL, e.g. `mqtt://127.0.0.1:1883`; the adapter owns (and ends) this client. */
  readonly url?: string;
  /**
   * An existing MQTT.js client (MQTT 5, `clean: false`) instead of `url`; never ended by the
   * adapter. Its acks are taken over: give it to one consumer only.
   */
  readonly client?: MqttClient;
  /** Extra MQTT.js options for the client made from `url` (auth, TLS …). */
  readonly clientOptions?: MqttClientOptions;
  /** Topic filter to subscribe to at QoS 1 (wildcards allowed). */
  readonly topic: string;
  /** Fixed client id: the broker keeps the session (subscription, unacked messages) under it. */
  readonly clientId: string;
  /** Session expiry interval of the client made from `url`, in seconds. Default 86 400 (1 day). */
  readonly sessionExpirySeconds?: number;
  /** Delay before a deferred delivery is handled again, in ms; it doubles with each deferral in a row. Default 1000. */
  readonly deferMs?: number;
  /** Upper bound of that delay, in ms. Default 10 000. */
  readonly deferCapMs?: number;
}

type Defaulted = 'concurrency' | 'logger' | 'sessionExpirySeconds' | 'deferMs' | 'deferCapMs';

export interface ResolvedMqttConsumerOptions<T = unknown, Tx = PoolClient>
  extends Omit<MqttConsumerOptions<T, Tx>, Defaulted>,
    ResolvedConsumerOptions<T, Tx> {
  readonly sessionExpirySeconds: number;
  readonly defer: DeferPolicy;
}

/** Checked (errors name the option and the fix), defaults in. */
export function resolveMqttConsumerOptions<T, Tx>(
  options: MqttConsumerOptions<T, Tx>,
): ResolvedMqttConsumerOptions<T, Tx> {
  checkInboxAndHandler(options);
  const hasUrl = typeof options.url === 'string' && options.url !== '';
  checkConsumerAddress(options, hasUrl);
  if (hasUrl && !URL.canParse(options.url!))
    throw new OutboxValidationError('url', 'is not a URL', 'Give e.g. mqtt://127.0.0.1:1883.');
  checkNames(options, ['topic', 'clientId']);
  checkIntegers(
    options,
    { concurrency: 1, deferMs: 0, deferCapMs: 0, sessionExpirySeconds: 0 },
    'Use a non-negative integer.',
  );
  return Object.freeze({
    ...options,
    ...consumerDefaults(options),
    sessionExpirySeconds: options.sessionExpirySeconds ?? 86_400,
    defer: deferPolicy(options),
  });
}
