/**
 * The clients the publisher makes from `url`: the producer (idempotent, acks=all, bounded
 * retries) and, for `createTopics`, an admin client; both dial `mapBrokerAddress(advertised)`
 * when it is given.
 */
import {
  Admin,
  type Base,
  type Broker,
  type Callback,
  type Connection,
  kGetBootstrapConnection,
  kGetConnection,
  ProduceAcks,
  Producer,
  type ProducerOptions,
} from '@platformatic/kafka';
import { bootstrapAddresses, parseAddress } from './addresses.js';
import type { AddressMap, KafkaProducer, KafkaSettings } from './options.js';

/** The settings both clients share. */
function clientOptions(settings: KafkaSettings) {
  const timeout = settings.timeoutMs;
  return {
    clientId: settings.clientId,
    bootstrapBrokers: [...settings.url],
    connectTimeout: Math.min(timeout, 5_000),
    requestTimeout: timeout,
    timeout,
    // Bounded, so a send settles within a few timeouts; above 1, as 0 and 1 mean "forever"
    // for an idempotent producer of @platformatic/kafka 1.x.
    retries: 2,
    retryDelay: 100,
    ...settings.clientOptions,
  };
}

/** The producer of a publisher given `url` (the publisher owns and closes it). */
export function createProducer(settings: KafkaSettings): KafkaProducer {
  const options: ProducerOptions<Buffer, Buffer, Buffer, Buffer> = {
    ...clientOptions(settings),
    idempotent: settings.idempotent,
    acks: ProduceAcks.ALL,
    // Keys carry their partition (see partitionFor); never auto-create through metadata.
    autocreateTopics: false,
  };
  const map = settings.mapBrokerAddress;
  return map === undefined ? new Producer(options) : new (dialing(Producer, map))(options);
}

/** The admin client that creates missing topics. */
export function createAdmin(settings: KafkaSettings): Admin {
  const options = clientOptions(settings);
  const map = settings.mapBrokerAddress;
  return map === undefined ? new Admin(options) : new (dialing(Admin, map))(options);
}

// biome-ignore lint/suspicious/noExplicitAny: a mixin's base class must take any arguments
type ClientClass = new (...args: any[]) => Base;

/** `Client` made to dial `map(advertised)` instead of the address a broker advertises. */
function dialing<C extends ClientClass>(Client: C, map: AddressMap): C {
  return class Dialing extends Client {
    readonly #bootstrap: Broker[];

    // biome-ignore lint/suspicious/noExplicitAny: the client's own constructor arguments
    constructor(...args: any[]) {
      super(...args);
      this.#bootstrap = (args[0].bootstrapBrokers as string[]).map(parseAddress);
    }

    override [kGetConnection](broker: Broker, callback: Callback<Connection>): void {
      super[kGetConnection](map(broker), callback);
    }

    override [kGetBootstrapConnection](callback: Callback<Connection>): void {
      const seen = this.currentMetadata?.brokers.values();
      this.connections.getFirstAvailable(bootstrapAddresses(this.#bootstrap, seen, map), callback);
    }
  };
}
