import type { Options, SocketOptions } from 'amqplib';
import { ceSourceOption } from '../../envelope/ce-source.js';
import { OutboxValidationError } from '../../errors.js';
import { checkUrlOrClient, positiveInteger } from '../../options/checks.js';
import { renamedOptions } from '../../options/renamed.js';
import type { OutboxMessage } from '../contract.js';
import { destinationOption } from '../core/destination.js';
import { type AmqpConnection, describeUrl } from './link.js';
import { defaultRoutingKey, SHORTSTR_MAX } from './wire.js';

/** Options of {@link rabbitmqPublisher}. Give `url` or an existing `client`. */
export interface RabbitMqPublisherOptions {
  /**
   * Broker URL (`amqp://user:pass@host:5672/vhost`, `amqps://…`) or amqplib's connect object.
   * The publisher owns this connection: it opens it at the first publish, opens a new one at
   * the next publish after it dropped, and closes it in `close()`.
   */
  readonly url?: string | Options.Connect;
  /** Socket and client options for the connection made from `url` (TLS, heartbeat …). */
  readonly clientOptions?: SocketOptions;
  /** @deprecated Use `clientOptions`. */
  readonly socketOptions?: SocketOptions;
  /**
   * An existing connection to use instead of `url`. The publisher opens its own confirm
   * channel on it (again after the channel closed) but never closes the connection; a plain
   * connection that dropped is not reopened (pass one made with amqplib's `recovery` for that).
   * Its `error` events are yours to listen to; the publisher listens only on its own channels.
   */
  readonly client?: AmqpConnection;
  /** @deprecated Use `client`. */
  readonly connection?: AmqpConnection;
  /**
   * Exchange to publish to: a name, or a function choosing it per message. `''` is the
   * default exchange (the routing key is then a queue name). Default `tx-outbox`.
   */
  readonly exchange?: string | ((message: OutboxMessage) => string);
  /** Routing key of a message. Default: `message.topic`, else `${aggregateType}.${type}`. */
  readonly destination?: (message: OutboxMessage) => string;
  /** @deprecated Use `destination`. */
  readonly routingKey?: (message: OutboxMessage) => string;
  /**
   * Declare every exchange used (once per channel, before its first publish) as a durable
   * `topic` exchange. Default false: the exchange must exist (it is checked passively, so a
   * missing exchange fails its messages instead of closing the channel).
   */
  readonly assertExchange?: boolean;
  /**
   * CloudEvents `source` attribute: a URI-reference of at most 255 characters (`ceSourceOf`:
   * RabbitMQ would hand a longer one to AMQP 1.0 consumers as binary). Default `tx-outbox`.
   */
  readonly ceSource?: string;
  /** @deprecated Use `ceSource`. */
  readonly source?: string;
  /** Deadline for connecting and for each publisher confirm, in ms. Default 10 000. */
  readonly timeoutMs?: number;
  /** Upper bound of messages awaiting their confirm, across concurrent batches. Default 1024. */
  readonly maxInFlight?: number;
  /**
   * Largest payload sent, in bytes; a larger one fails permanently without being sent.
   * Default: no client-side limit until the broker refuses a message for its size
   * (`max_message_size`: 128 MiB on RabbitMQ 3.x, 16 MiB on 4.x); that limit is then applied.
   */
  readonly maxMessageBytes?: number;
}

/** The options once resolved: old spellings moved, validated, defaults filled in; frozen. */
export interface ResolvedRabbitMqOptions {
  /** As given; the publisher owns its connection when no `client` is given. */
  readonly url: string | Options.Connect | undefined;
  readonly clientOptions: SocketOptions | undefined;
  readonly client: AmqpConnection | undefined;
  readonly exchange: string | ((message: OutboxMessage) => string);
  readonly destination: (message: OutboxMessage) => string;
  readonly assertExchange: boolean;
  readonly source: string;
  readonly timeoutMs: number;
  readonly maxInFlight: number;
  /** `Infinity` when not given (the broker's limit is learned from its first refusal). */
  readonly maxMessageBytes: number;
}

export const DEFAULT_EXCHANGE = 'tx-outbox';
export const DEFAULT_TIMEOUT_MS = 10_000;
export const DEFAULT_MAX_IN_FLIGHT = 1024;

/** The old spellings of this publisher's options (see src/options/renamed.ts). */
const RENAMES = {
  connection: 'client',
  socketOptions: 'clientOptions',
  routingKey: 'destination',
  source: 'ceSource',
} as const;

/** Old spellings → new names, then validation (each error names the field and the fix), then defaults. */
export function resolveRabbitMqOptions(given: RabbitMqPublisherOptions): ResolvedRabbitMqOptions {
  const options = renamedOptions('rabbitmqPublisher', given, RENAMES);
  const { url, client, exchange, destination } = options;
  const hasUrl = url !== undefined && url !== '';
  checkUrlOrClient({ hasUrl, hasClient: client !== undefined, urlExample: 'amqp://…' });
  if (typeof url === 'string' && hasUrl && !/^amqps?:\/\//i.test(url)) {
    throw new OutboxValidationError(
      'url',
      `must start with amqp:// or amqps://, got ${describeUrl(url)}`,
      'Fix the URL',
    );
  }
  if (client !== undefined && typeof client.createConfirmChannel !== 'function') {
    throw new OutboxValidationError('client', 'is not an amqplib connection', 'Pass what connect() returns');
  }
  if (exchange !== undefined && typeof exchange !== 'string' && typeof exchange !== 'function') {
    throw new OutboxValidationError('exchange', 'must be a string or a function', 'Fix the option');
  }
  if (typeof exchange === 'string' && Buffer.byteLength(exchange) > SHORTSTR_MAX) {
    throw new OutboxValidationError('exchange', `is longer than ${SHORTSTR_MAX} bytes`, 'Use a shorter name');
  }
  if (exchange === '' && options.assertExchange === true) {
    throw new OutboxValidationError(
      'assertExchange',
      "cannot declare the default exchange ''",
      'Name an exchange or leave assertExchange off',
    );
  }
  const source = ceSourceOption(given, options.ceSource);
  return Object.freeze({
    url,
    clientOptions: options.clientOptions,
    client,
    exchange: exchange ?? DEFAULT_EXCHANGE,
    destination: destinationOption(given, 'routingKey', destination, defaultRoutingKey),
    assertExchange: options.assertExchange === true,
    source,
    timeoutMs: positiveInteger('timeoutMs', options.timeoutMs, DEFAULT_TIMEOUT_MS),
    maxInFlight: positiveInteger('maxInFlight', options.maxInFlight, DEFAULT_MAX_IN_FLIGHT),
    maxMessageBytes: positiveInteger('maxMessageBytes', options.maxMessageBytes, Number.POSITIVE_INFINITY),
  });
}
