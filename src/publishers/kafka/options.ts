/**
 * The options of {@link kafkaPublisher}, and their resolution, once, into a frozen
 * {@link KafkaSettings}: old spellings moved to the new names (renamedOptions), then checked
 * (each error names the option and the fix), then defaults filled in.
 */
import type { Producer, ProducerOptions } from '@platformatic/kafka';
import { ceSourceOption } from '../../envelope/ce-source.js';
import { OutboxValidationError } from '../../errors.js';
import { checkPositiveInteger, checkUrlOrClient } from '../../options/checks.js';
import { renamedOptions } from '../../options/renamed.js';
import type { OutboxMessage } from '../contract.js';
import { destinationOption } from '../core/destination.js';
import { defaultTopic } from './names.js';

/** The producer type this publisher drives: Buffer keys, values and headers (no serializers). */
export type KafkaProducer = Producer<Buffer, Buffer, Buffer, Buffer>;

/** A broker address. */
export interface KafkaAddress {
  readonly host: string;
  readonly port: number;
}

/** Connection settings passed through to the client (TLS, SASL, connect timeout, metadata age). */
export type KafkaClientOptions = Pick<
  ProducerOptions<Buffer, Buffer, Buffer, Buffer>,
  'tls' | 'ssl' | 'tlsServerName' | 'sasl' | 'connectTimeout' | 'metadataMaxAge'
>;

/** How {@link kafkaPublisher} creates a missing topic. */
export interface KafkaTopicDefaults {
  /** Partitions of a created topic. Default: the broker's `num.partitions`. */
  readonly partitions?: number;
  /** Replication factor of a created topic. Default: the broker's `default.replication.factor`. */
  readonly replicationFactor?: number;
}

/** Options of {@link kafkaPublisher}. Give `url` or an existing `client`. */
export interface KafkaPublisherOptions {
  /**
   * Bootstrap brokers, `host:port` (one, or a list). The publisher owns (and closes) the producer
   * it creates.
   */
  readonly url?: string | readonly string[];
  /** @deprecated Use `url`. */
  readonly brokers?: readonly string[];
  /**
   * An existing producer (Buffer keys, values and headers) to use instead of `url`; the
   * publisher never closes it. Create it with `idempotent: true`, and send nothing else through
   * it concurrently: @platformatic/kafka 1.x numbers idempotent batches per partition without
   * coordinating concurrent sends.
   */
  readonly client?: KafkaProducer;
  /** @deprecated Use `client`. */
  readonly producer?: KafkaProducer;
  /** Client id shown in broker logs and quotas. Default `tx-outbox`. */
  readonly clientId?: string;
  /** TLS, SASL and other connection settings of the producer made from `url`. */
  readonly clientOptions?: KafkaClientOptions;
  /**
   * Deadline of a publish, in ms: waiting for an earlier batch, metadata, topic creation and the
   * acknowledgements of all its produce requests. Default 10 000.
   */
  readonly timeoutMs?: number;
  /** Topic of a message. Default: `message.topic`, else `${aggregateType}.${type}`. */
  readonly destination?: (message: OutboxMessage) => string;
  /** @deprecated Use `destination`. */
  readonly topic?: (message: OutboxMessage) => string;
  /**
   * CloudEvents `source` attribute: a URI-reference such as `https://orders.example.com`,
   * `urn:example:orders` or `/orders`. Default `tx-outbox`.
   */
  readonly ceSource?: string;
  /** @deprecated Use `ceSource`. */
  readonly source?: string;
  /**
   * Creates a missing topic at first use (`true`: the broker's default partitions and
   * replication). For tests and development; production topics are better created on purpose.
   * Without it, events for a missing topic fail as retryable.
   */
  readonly createTopics?: boolean | KafkaTopicDefaults;
  /** Idempotent producer (no duplicates from the client's own retries). Default true. */
  readonly idempotent?: boolean;
  /**
   * Largest record batch sent to one partition, in bytes, as the Java client's
   * `max.request.size`: a larger message fails permanently before sending, and a batch is split
   * so that each partition's records fit. Match the topic's `max.message.bytes`. Default 1 MiB.
   */
  readonly maxMessageBytes?: number;
  /**
   * Maps the address a broker advertises in metadata to the one to dial: for port forwards,
   * SSH tunnels and test proxies, where the advertised `host:port` is not reachable as such.
   */
  readonly mapBrokerAddress?: (advertised: KafkaAddress) => KafkaAddress;
}

/** Maps an advertised broker address to the one to dial. */
export type AddressMap = (advertised: KafkaAddress) => KafkaAddress;

/** {@link KafkaPublisherOptions} resolved: new names only, checked, defaults filled in; frozen. */
export interface KafkaSettings {
  /** Bootstrap brokers; empty when a `client` is given. */
  readonly url: readonly string[];
  readonly client: KafkaProducer | undefined;
  readonly clientId: string;
  readonly clientOptions: KafkaClientOptions | undefined;
  readonly timeoutMs: number;
  readonly destination: (message: OutboxMessage) => string;
  readonly source: string;
  /** How to create a missing topic, or false: never. */
  readonly createTopics: false | KafkaTopicDefaults;
  readonly idempotent: boolean;
  readonly maxMessageBytes: number;
  readonly mapBrokerAddress: AddressMap | undefined;
}

export const DEFAULT_TIMEOUT_MS = 10_000;
export const DEFAULT_MAX_MESSAGE_BYTES = 1_048_576;

/** Old spelling → new name (see src/options/renamed.ts). */
const RENAMES = { brokers: 'url', producer: 'client', topic: 'destination', source: 'ceSource' } as const;

const HOST_PORT = /^[^\s:]+:\d{1,5}$|^\[[0-9a-fA-F:.]+\]:\d{1,5}$/;

/** The options as the publisher uses them; throws OutboxValidationError naming the field and the fix. */
export function resolveKafkaOptions(given: KafkaPublisherOptions): KafkaSettings {
  const renamed = renamedOptions('kafkaPublisher', given, RENAMES);
  // One `host:port` is a list of one, as `consumeKafka` reads it.
  const options = typeof renamed.url === 'string' ? { ...renamed, url: [renamed.url] } : renamed;
  checkKafkaOptions(options);
  const createTopics = options.createTopics;
  return Object.freeze({
    url: Object.freeze([...(options.url ?? [])]),
    client: options.client,
    clientId: options.clientId ?? 'tx-outbox',
    clientOptions: options.clientOptions,
    timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    destination: destinationOption(given, 'topic', options.destination, defaultTopic),
    source: ceSourceOption(given, options.ceSource),
    createTopics:
      createTopics === undefined || createTopics === false
        ? false
        : typeof createTopics === 'object'
          ? createTopics
          : {},
    idempotent: options.idempotent ?? true,
    maxMessageBytes: options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES,
    mapBrokerAddress: options.mapBrokerAddress,
  });
}

/** The checks, on the new names only. */
function checkKafkaOptions(options: KafkaPublisherOptions): void {
  const hasUrl = options.url !== undefined && options.url.length > 0;
  checkUrlOrClient({
    hasUrl,
    urlGiven: options.url !== undefined,
    hasClient: options.client !== undefined,
    urlExample: 'host:port list',
  });
  for (const broker of options.url ?? []) {
    if (typeof broker !== 'string' || !HOST_PORT.test(broker)) {
      throw new OutboxValidationError(
        'url',
        `has an entry that is not host:port: ${JSON.stringify(broker)}`,
        'Write each broker as host:port, e.g. 127.0.0.1:9092',
      );
    }
  }
  if (options.client !== undefined && options.createTopics) {
    throw new OutboxValidationError(
      'createTopics',
      'needs `url` (it creates topics with its own admin client)',
      'Give `url` instead of `client`, or create the topics beforehand',
    );
  }
  checkPositiveInteger('timeoutMs', options.timeoutMs);
  checkPositiveInteger('maxMessageBytes', options.maxMessageBytes);
  if (typeof options.createTopics === 'object') {
    checkPositiveInteger('createTopics.partitions', options.createTopics.partitions);
    checkPositiveInteger('createTopics.replicationFactor', options.createTopics.replicationFactor);
  }
}
