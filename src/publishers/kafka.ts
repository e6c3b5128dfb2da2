/**
 * Apache Kafka publisher, on @platformatic/kafka (pure JavaScript, no native addon).
 *
 * Every message is keyed by its aggregate id, so one aggregate's events share a partition and
 * stay in order; the partition is chosen as the Java client's default partitioner does
 * (murmur2 of the key), so this publisher and any Java, Kafka Connect or librdkafka producer
 * (`murmur2_random`) put an aggregate in the same partition. The CloudEvents envelope travels
 * in the record headers, the payload bytes are the record value, untouched.
 *
 * A publish sends the whole batch in as few produce requests as the broker allows (one record
 * batch per partition, each at most `maxMessageBytes`), grouped per leader by the client, with
 * `acks=all` and, by default, the idempotent producer.
 */
import {
  Admin,
  type Broker,
  type Callback,
  type Connection,
  kGetBootstrapConnection,
  kGetConnection,
  type MessageToProduce,
  ProduceAcks,
  Producer,
  type ProducerOptions,
} from '@platformatic/kafka';
import { BROKER_UNAVAILABLE, errorMessage, OutboxValidationError, PublishError } from '../errors.js';
import { checkPositiveInteger } from '../options/checks.js';
import { sleep } from '../sleep.js';
import { DELIVERED, failed, type OutboxMessage, type Publisher, type PublishOutcome } from './contract.js';
import { asBuffer } from './core/bytes.js';
import { publisherClosed } from './core/closed.js';
import { defaultDestination } from './core/destination.js';
import { permanent } from './core/outcomes.js';
import { envelopeHeaders } from './envelope.js';

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

/** Options of {@link kafkaPublisher}. Give `brokers` or an existing `producer`. */
export interface KafkaPublisherOptions {
  /** Bootstrap brokers, `host:port`. The publisher owns (and closes) the producer it creates. */
  readonly brokers?: readonly string[];
  /**
   * An existing producer (Buffer keys, values and headers) to use instead of `brokers`; the
   * publisher never closes it. Create it with `idempotent: true`, and send nothing else through
   * it concurrently: @platformatic/kafka 1.x numbers idempotent batches per partition without
   * coordinating concurrent sends.
   */
  readonly producer?: KafkaProducer;
  /** Client id shown in broker logs and quotas. Default `tx-outbox`. */
  readonly clientId?: string;
  /** TLS, SASL and other connection settings of the producer made from `brokers`. */
  readonly clientOptions?: KafkaClientOptions;
  /**
   * Deadline of a publish, in ms: waiting for an earlier batch, metadata, topic creation and the
   * acknowledgements of all its produce requests. Default 10 000.
   */
  readonly timeoutMs?: number;
  /** Topic of a message. Default: `message.topic`, else `${aggregateType}.${type}`. */
  readonly topic?: (message: OutboxMessage) => string;
  /** CloudEvents `source` attribute. Default `tx-outbox`. */
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

const DEFAULT_TIMEOUT_MS = 10_000;
const DEFAULT_MAX_MESSAGE_BYTES = 1_048_576;
/** Upper bound of one produce request (the broker's `socket.request.max.bytes` is 100 MiB). */
const MAX_REQUEST_BYTES = 16 * 1_048_576;
/** Record batch header (v2) in front of a partition's records. */
const BATCH_OVERHEAD = 61;
const MAX_TOPIC_LENGTH = 249;
const TOPIC_PATTERN = /^[a-zA-Z0-9._-]+$/;

/** Produce error codes a retry cannot cure, with the reason given to the user. */
const PERMANENT_CODES: ReadonlyMap<number, string> = new Map([
  [10, "the message is larger than the topic's max.message.bytes (MESSAGE_TOO_LARGE)"],
  [18, "the record batch is larger than the topic's max.message.bytes (RECORD_LIST_TOO_LARGE)"],
  [17, 'the broker rejects the topic name (INVALID_TOPIC_EXCEPTION)'],
  [29, 'not authorized to write to the topic (TOPIC_AUTHORIZATION_FAILED)'],
  [31, 'not authorized on the cluster, e.g. IdempotentWrite (CLUSTER_AUTHORIZATION_FAILED)'],
  [53, 'not authorized for the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)'],
  [21, 'the broker rejects acks=all (INVALID_REQUIRED_ACKS)'],
  [32, "the record's timestamp is out of the topic's accepted range (INVALID_TIMESTAMP)"],
  [43, 'the topic does not accept this record format (UNSUPPORTED_FOR_MESSAGE_FORMAT)'],
  [44, "the topic's policy rejects the record (POLICY_VIOLATION)"],
  [76, 'the topic does not accept the compression type (UNSUPPORTED_COMPRESSION_TYPE)'],
  [87, 'the broker rejects the record (INVALID_RECORD)'],
]);
const TOO_LARGE_CODES: ReadonlySet<number> = new Set([10, 18]);
const TOPIC_ALREADY_EXISTS = 36;

/** `message.topic`, else `${aggregateType}.${type}`. */
export const defaultTopic: (message: OutboxMessage) => string = defaultDestination;

/** Why Kafka would refuse the topic name, or undefined when it is fine. */
export function topicProblem(topic: string): string | undefined {
  if (topic.length === 0) return 'is empty';
  if (topic.length > MAX_TOPIC_LENGTH) {
    return `is ${topic.length} characters long; Kafka allows at most ${MAX_TOPIC_LENGTH}`;
  }
  if (topic === '.' || topic === '..') return 'is "." or ".."';
  if (!TOPIC_PATTERN.test(topic)) return 'has characters other than ASCII letters, digits, ".", "_" and "-"';
  return undefined;
}

/**
 * Kafka's murmur2 hash (the Java client's `Utils.murmur2`), as a signed 32-bit integer.
 */
export function murmur2(data: Uint8Array): number {
  const m = 0x5bd1e995;
  const length = data.length;
  let h = 0x9747b28c ^ length;
  const whole = length & ~3;
  for (let i = 0; i < whole; i += 4) {
    let k = data[i]! | (data[i + 1]! << 8) | (data[i + 2]! << 16) | (data[i + 3]! << 24);
    k = Math.imul(k, m);
    k ^= k >>> 24;
    k = Math.imul(k, m);
    h = Math.imul(h, m) ^ k;
  }
  switch (length & 3) {
    // biome-ignore lint/suspicious/noFallthroughSwitchClause: the reference algorithm falls through
    case 3:
      h ^= data[whole + 2]! << 16;
    // biome-ignore lint/suspicious/noFallthroughSwitchClause: the reference algorithm falls through
    case 2:
      h ^= data[whole + 1]! << 8;
    case 1:
      h ^= data[whole]!;
      h = Math.imul(h, m);
  }
  h ^= h >>> 13;
  h = Math.imul(h, m);
  h ^= h >>> 15;
  return h | 0;
}

/** The partition of a key, as the Java client's default partitioner picks it. */
export function partitionFor(key: Uint8Array, partitions: number): number {
  return (murmur2(key) & 0x7fffffff) % partitions;
}

/**
 * A {@link Publisher} for Apache Kafka. The producer connects lazily at the first publish and
 * reconnects on its own; while the brokers cannot be reached, publishes fail as retryable with
 * code `TXO_BROKER_UNAVAILABLE` (within `timeoutMs`), and work again once they are back.
 *
 * Outcomes, per message: an invalid topic name, a message over `maxMessageBytes`, and the
 * broker's refusals that a retry cannot cure (message too large, invalid topic, authorization,
 * policy) fail permanently; a missing topic (without `createTopics`), leader changes, timeouts
 * and unreachable brokers are retryable. Messages of the partitions the broker acknowledged are
 * delivered even when others of the same batch failed.
 *
 * Batches are sent one at a time (the idempotent producer's sequence numbers need it), and after
 * any failed send the idempotent producer takes a new producer id before the next one, so that a
 * partly failed request can never make the broker drop later batches as duplicates.
 *
 * `close()` is idempotent: it waits for the batches in flight (each settles within about
 * `timeoutMs`), then closes the producer it created; later publishes reject with an OutboxError
 * `TXO_PUBLISHER_CLOSED`.
 *
 * @example
 * const publisher = kafkaPublisher({ brokers: ['127.0.0.1:9092'], clientId: 'orders-relay' });
 */
export function kafkaPublisher(options: KafkaPublisherOptions): Publisher {
  validateOptions(options);
  return new KafkaPublisher(options);
}

function validateOptions(options: KafkaPublisherOptions): void {
  const hasBrokers = options.brokers !== undefined && options.brokers.length > 0;
  if (!hasBrokers && options.producer === undefined) {
    throw new OutboxValidationError(
      'brokers',
      'is missing',
      'Give `brokers` (host:port list) or a `producer`',
    );
  }
  if (options.producer !== undefined && options.brokers !== undefined) {
    throw new OutboxValidationError('producer', 'was given together with `brokers`', 'Give only one of them');
  }
  for (const broker of options.brokers ?? []) {
    if (typeof broker !== 'string' || !/^[^\s:]+:\d{1,5}$|^\[[0-9a-fA-F:.]+\]:\d{1,5}$/.test(broker)) {
      throw new OutboxValidationError(
        'brokers',
        `has an entry that is not host:port: ${JSON.stringify(broker)}`,
        'Write each broker as host:port, e.g. 127.0.0.1:9092',
      );
    }
  }
  if (options.producer !== undefined && options.createTopics) {
    throw new OutboxValidationError(
      'createTopics',
      'needs `brokers` (it creates topics with its own admin client)',
      'Give `brokers` instead of `producer`, or create the topics beforehand',
    );
  }
  checkPositiveInteger('timeoutMs', options.timeoutMs);
  checkPositiveInteger('maxMessageBytes', options.maxMessageBytes);
  if (typeof options.createTopics === 'object') {
    checkPositiveInteger('createTopics.partitions', options.createTopics.partitions);
    checkPositiveInteger('createTopics.replicationFactor', options.createTopics.replicationFactor);
  }
}

/** A message ready to send: topic checked, key, value and headers encoded. */
interface Item {
  /** Position in the batch. */
  readonly index: number;
  readonly topic: string;
  readonly key: Buffer;
  readonly value: Buffer;
  readonly headers: Map<Buffer, Buffer>;
  /** Upper bound of the encoded record's size. */
  readonly bytes: number;
  partition: number;
}

/** What one publish shares with its send job: the outcomes so far, and whether to stop. */
interface Job {
  readonly items: readonly Item[];
  readonly outcomes: Map<number, PublishOutcome>;
  /** Set when the publish gave up (deadline or abort): the job stops at the next step. */
  stopped: boolean;
  /** The last failure of the whole job (no per-message outcome), for the unsent messages. */
  lastError: PublishError | undefined;
}

class KafkaPublisher implements Publisher {
  readonly name = 'kafka';
  readonly #options: KafkaPublisherOptions;
  readonly #producer: KafkaProducer;
  readonly #owned: boolean;
  readonly #timeoutMs: number;
  readonly #source: string;
  readonly #maxMessageBytes: number;
  readonly #pickTopic: (message: OutboxMessage) => string;
  #admin: Admin | undefined;
  /** Topics this publisher created (with createTopics). */
  readonly #createdTopics = new Set<string>();
  /** The send jobs, one after the other. */
  #tail: Promise<void> = Promise.resolve();
  /** After a failed send: the idempotent producer takes a new producer id before the next send. */
  #reinit = false;
  #closed = false;
  #closing: Promise<void> | undefined;

  constructor(options: KafkaPublisherOptions) {
    this.#options = options;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#source = options.source ?? 'tx-outbox';
    this.#maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    this.#pickTopic = options.topic ?? defaultTopic;
    this.#owned = options.producer === undefined;
    this.#producer = options.producer ?? this.#createProducer();
  }

  async publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (this.#closed) {
      throw publisherClosed('Kafka');
    }
    const outcomes = new Map<number, PublishOutcome>();
    const items: Item[] = [];
    batch.forEach((message, index) => {
      const prepared = this.#prepare(message, index);
      if ('ok' in prepared) outcomes.set(index, prepared);
      else items.push(prepared);
    });
    if (items.length === 0) return batch.map((_, i) => outcomes.get(i)!);

    const job: Job = { items, outcomes, stopped: false, lastError: undefined };
    const run = this.#tail.then(() => this.#run(job));
    this.#tail = run.catch(() => undefined);
    const giveUp = deadline(this.#timeoutMs, signal);
    let reason: PublishError | undefined;
    try {
      await Promise.race([run, giveUp.promise]);
    } catch (error) {
      reason = error instanceof PublishError ? error : this.#unexpected(error);
      // Given up while the client still tries to reach a broker: the broker's fault, not the events'.
      if (!this.#producer.isConnected()) {
        reason = new PublishError(`Kafka is not available: ${reason.message}`, {
          retryable: true,
          code: BROKER_UNAVAILABLE,
          cause: reason,
        });
      }
    } finally {
      giveUp.dispose();
      job.stopped = true;
    }
    // A snapshot: a send still under way after the deadline must not change what we return.
    return batch.map((_, i) => {
      const outcome = outcomes.get(i);
      if (outcome !== undefined) return outcome;
      const error = job.lastError ?? reason ?? this.#unexpected(new Error('no outcome'));
      return failed(error, true);
    });
  }

  close(): Promise<void> {
    this.#closing ??= this.#shutdown();
    return this.#closing;
  }

  // --- preparing ----------------------------------------------------------------------------

  /** Topic, key, value and headers of a message, or its permanent outcome. */
  #prepare(message: OutboxMessage, index: number): Item | PublishOutcome {
    let topic: string;
    try {
      topic = this.#pickTopic(message);
    } catch (error) {
      return permanent(
        `The topic function threw for event ${message.eventId}: ${errorMessage(error)}`,
        error,
      );
    }
    const problem = typeof topic === 'string' ? topicProblem(topic) : 'is not a string';
    if (problem !== undefined) {
      return permanent(
        `Kafka rejects topic ${JSON.stringify(topic).slice(0, 300)} (event ${message.eventId}): it ${problem}`,
      );
    }
    const key = Buffer.from(message.aggregateId);
    const value = asBuffer(message.payload);
    const headers = new Map<Buffer, Buffer>();
    let bytes = 36 + key.length + value.length;
    const envelope = envelopeHeaders(message, this.#source);
    for (const name in envelope) {
      const nameBytes = headerName(name);
      const valueBytes = Buffer.from(envelope[name]!);
      headers.set(nameBytes, valueBytes);
      bytes += 10 + nameBytes.length + valueBytes.length;
    }
    if (bytes + BATCH_OVERHEAD > this.#maxMessageBytes) {
      return permanent(
        `Message of about ${bytes} bytes for topic "${topic}" (event ${message.eventId}) exceeds ` +
          `maxMessageBytes (${this.#maxMessageBytes}); raise it together with the topic's max.message.bytes`,
      );
    }
    return { index, topic, key, value, headers, bytes, partition: -1 };
  }

  // --- sending ------------------------------------------------------------------------------

  /** Sends a publish's messages; runs alone (one job at a time). */
  async #run(job: Job): Promise<void> {
    if (job.stopped) return;
    const producer = this.#producer;
    if (this.#reinit && producer.producerId !== undefined) {
      try {
        await producer.initIdempotentProducer({});
        this.#reinit = false;
      } catch (error) {
        job.lastError = classify(error, 'a new producer id');
        return;
      }
    }
    if (job.stopped) return;

    // Partition counts, per topic; a topic that cannot be used fails its own messages only.
    const byTopic = new Map<string, Item[]>();
    for (const item of job.items) {
      const list = byTopic.get(item.topic);
      if (list === undefined) byTopic.set(item.topic, [item]);
      else list.push(item);
    }
    const ready: Item[] = [];
    for (const [topic, items] of byTopic) {
      const partitions = await this.#partitions(topic);
      if (typeof partitions !== 'number') {
        for (const item of items) job.outcomes.set(item.index, partitions);
        continue;
      }
      for (const item of items) {
        item.partition = partitionFor(item.key, partitions);
        ready.push(item);
      }
      if (job.stopped) return;
    }

    // One request per chunk; a partition's records in a chunk fit maxMessageBytes.
    const queue = chunk(ready, this.#maxMessageBytes);
    while (queue.length > 0 && !job.stopped) {
      const items = queue.shift()!;
      // Halves of a partition's records the broker found too large together go next, in order.
      queue.unshift(...(await this.#send(producer, items, job)));
      if (job.lastError !== undefined && isBrokerUnavailableError(job.lastError)) return;
    }
  }

  /**
   * One produce call. Records the outcome of each message it settles; returns what to send
   * again: the halves of each partition's records that the broker refused as too large together
   * (the topic's max.message.bytes is below maxMessageBytes), down to single messages.
   */
  async #send(producer: KafkaProducer, items: readonly Item[], job: Job): Promise<Item[][]> {
    const messages: MessageToProduce<Buffer, Buffer, Buffer, Buffer>[] = items.map((item) => ({
      topic: item.topic,
      partition: item.partition,
      key: item.key,
      value: item.value,
      headers: item.headers,
    }));
    try {
      await producer.send({ messages, acks: ProduceAcks.ALL });
      for (const item of items) job.outcomes.set(item.index, DELIVERED);
      return [];
    } catch (error) {
      // The producer's sequence numbers may now disagree with the broker's.
      this.#reinit = true;
      const verdicts = partitionVerdicts(error);
      const general = classify(error, items.length === 1 ? `topic "${items[0]!.topic}"` : 'the batch');
      const perPartition = new Map<string, Item[]>();
      for (const item of items) {
        const key = `${item.topic}:${item.partition}`;
        const list = perPartition.get(key);
        if (list === undefined) perPartition.set(key, [item]);
        else list.push(item);
      }
      const again: Item[][] = [];
      for (const [key, group] of perPartition) {
        if (verdicts.delivered.has(key)) {
          for (const item of group) job.outcomes.set(item.index, DELIVERED);
          continue;
        }
        const code = verdicts.failed.get(key);
        if (code !== undefined && TOO_LARGE_CODES.has(code) && group.length > 1) {
          const half = Math.ceil(group.length / 2);
          again.push(group.slice(0, half), group.slice(half));
          continue;
        }
        const verdict =
          code === undefined ? general : partitionError(code, group[0]!.topic, group[0]!.partition, error);
        for (const item of group) job.outcomes.set(item.index, failed(verdict, verdict.retryable));
      }
      if (verdicts.failed.size === 0 && verdicts.delivered.size === 0) job.lastError = general;
      return again;
    }
  }

  /** The partition count of a topic (creating it when asked to), or the outcome of its messages. */
  async #partitions(topic: string): Promise<number | PublishOutcome> {
    try {
      return await this.#partitionCount(topic, false);
    } catch (error) {
      if (!isUnknownTopic(error)) {
        const verdict = classify(error, `topic "${topic}"`);
        return failed(verdict, verdict.retryable);
      }
      if (this.#options.createTopics === undefined || this.#options.createTopics === false) {
        return failed(
          new PublishError(
            `Kafka topic "${topic}" does not exist: create it, or set createTopics (tests, development)`,
            { retryable: true, cause: error },
          ),
          true,
        );
      }
    }
    try {
      await this.#createTopic(topic);
      return await this.#partitionCount(topic, true);
    } catch (error) {
      const verdict = classify(error, `topic "${topic}"`);
      return failed(verdict, verdict.retryable);
    }
  }

  /** The partition count of an existing topic; with `waitForLeaders`, once every partition has a leader. */
  async #partitionCount(topic: string, waitForLeaders: boolean): Promise<number> {
    const started = Date.now();
    for (;;) {
      const metadata = await this.#producer.metadata({ topics: [topic], forceUpdate: waitForLeaders });
      const info = metadata.topics.get(topic);
      if (info === undefined) throw new Error(`Unknown topic ${topic}.`);
      let leaders = 0;
      for (let p = 0; p < info.partitionsCount; p++) if ((info.partitions[p]?.leader ?? -1) >= 0) leaders++;
      if (info.partitionsCount > 0 && leaders === info.partitionsCount) return info.partitionsCount;
      if (Date.now() - started > this.#timeoutMs) {
        throw new PublishError(`Kafka topic "${topic}" has partitions without a leader`, { retryable: true });
      }
      waitForLeaders = true;
      await sleep(100);
    }
  }

  async #createTopic(topic: string): Promise<void> {
    if (this.#createdTopics.has(topic)) return;
    const defaults = typeof this.#options.createTopics === 'object' ? this.#options.createTopics : {};
    this.#admin ??= this.#createAdmin();
    try {
      await this.#admin.createTopics({
        topics: [topic],
        ...(defaults.partitions === undefined ? {} : { partitions: defaults.partitions }),
        ...(defaults.replicationFactor === undefined ? {} : { replicas: defaults.replicationFactor }),
      });
    } catch (error) {
      if (protocolCodes(error).includes(TOPIC_ALREADY_EXISTS)) return;
      throw error;
    }
    this.#createdTopics.add(topic);
  }

  // --- clients ------------------------------------------------------------------------------

  #clientOptions() {
    const timeout = this.#timeoutMs;
    return {
      clientId: this.#options.clientId ?? 'tx-outbox',
      bootstrapBrokers: [...(this.#options.brokers ?? [])],
      connectTimeout: Math.min(timeout, 5_000),
      requestTimeout: timeout,
      timeout,
      // Bounded, so a send settles within a few timeouts; above 1, as 0 and 1 mean "forever"
      // for an idempotent producer of @platformatic/kafka 1.x.
      retries: 2,
      retryDelay: 100,
      ...this.#options.clientOptions,
    };
  }

  #createProducer(): KafkaProducer {
    const idempotent = this.#options.idempotent ?? true;
    const options: ProducerOptions<Buffer, Buffer, Buffer, Buffer> = {
      ...this.#clientOptions(),
      idempotent,
      acks: ProduceAcks.ALL,
      // Keys carry their partition (see partitionFor); never auto-create through metadata.
      autocreateTopics: false,
    };
    const map = this.#options.mapBrokerAddress;
    return map === undefined ? new Producer(options) : new MappedProducer(options, map);
  }

  #createAdmin(): Admin {
    const options = this.#clientOptions();
    const map = this.#options.mapBrokerAddress;
    return map === undefined ? new Admin(options) : new MappedAdmin(options, map);
  }

  #unexpected(error: unknown): PublishError {
    return new PublishError(`Kafka publish failed: ${errorMessage(error)}`, {
      retryable: true,
      cause: error,
    });
  }

  async #shutdown(): Promise<void> {
    this.#closed = true;
    // Every queued or running send settles within a few timeouts (bounded retries).
    await this.#tail;
    const admin = this.#admin;
    if (admin !== undefined) await new Promise<void>((resolve) => admin.close(() => resolve()));
    if (this.#owned) await this.#producer.close().catch(() => undefined);
  }
}

// --- address mapping ----------------------------------------------------------------------------

type AddressMap = (advertised: KafkaAddress) => KafkaAddress;

/** The configured bootstrap brokers, then every broker seen in metadata (mapped), each once. */
function bootstrapAddresses(
  bootstrap: Broker[],
  seen: Iterable<Broker> | undefined,
  map: AddressMap,
): Broker[] {
  const discovered = [...(seen ?? [])].map((b) => map(b));
  return uniqueAddresses([...bootstrap, ...discovered]);
}

function uniqueAddresses(brokers: readonly Broker[]): Broker[] {
  const seen = new Set<string>();
  return brokers.filter((b) => {
    const key = `${b.host}:${b.port}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

function parseAddress(broker: string): Broker {
  const at = broker.lastIndexOf(':');
  return { host: broker.slice(0, at).replace(/^\[(.*)\]$/, '$1'), port: Number(broker.slice(at + 1)) };
}

/** A producer that dials `map(advertised)` instead of the address a broker advertises. */
class MappedProducer extends Producer<Buffer, Buffer, Buffer, Buffer> {
  readonly #map: AddressMap;
  readonly #bootstrap: Broker[];

  constructor(options: ProducerOptions<Buffer, Buffer, Buffer, Buffer>, map: AddressMap) {
    super(options);
    this.#map = map;
    this.#bootstrap = (options.bootstrapBrokers as string[]).map(parseAddress);
  }

  override [kGetConnection](broker: Broker, callback: Callback<Connection>): void {
    super[kGetConnection](this.#map(broker), callback);
  }

  override [kGetBootstrapConnection](callback: Callback<Connection>): void {
    const seen = this.currentMetadata?.brokers.values();
    this.connections.getFirstAvailable(bootstrapAddresses(this.#bootstrap, seen, this.#map), callback);
  }
}

/** An admin client that dials `map(advertised)`, as {@link MappedProducer}. */
class MappedAdmin extends Admin {
  readonly #map: AddressMap;
  readonly #bootstrap: Broker[];

  constructor(options: ConstructorParameters<typeof Admin>[0], map: AddressMap) {
    super(options);
    this.#map = map;
    this.#bootstrap = (options.bootstrapBrokers as string[]).map(parseAddress);
  }

  override [kGetConnection](broker: Broker, callback: Callback<Connection>): void {
    super[kGetConnection](this.#map(broker), callback);
  }

  override [kGetBootstrapConnection](callback: Callback<Connection>): void {
    const seen = this.currentMetadata?.brokers.values();
    this.connections.getFirstAvailable(bootstrapAddresses(this.#bootstrap, seen, this.#map), callback);
  }
}

// --- batching -----------------------------------------------------------------------------------

/**
 * Splits the messages into produce requests: within one, each partition's records fit
 * `maxBytes` (the broker takes one record batch per partition and request) and the request
 * stays under MAX_REQUEST_BYTES. A relay batch usually fits one request.
 */
function chunk(items: readonly Item[], maxBytes: number): Item[][] {
  const chunks: { items: Item[]; total: number; perPartition: Map<string, number> }[] = [];
  /** The chunk of each partition's latest record: its next records go there or later (order). */
  const latest = new Map<string, number>();
  for (const item of items) {
    const key = `${item.topic}:${item.partition}`;
    let at = latest.get(key) ?? 0;
    for (; at < chunks.length; at++) {
      const c = chunks[at]!;
      const partitionBytes = (c.perPartition.get(key) ?? BATCH_OVERHEAD) + item.bytes;
      if (partitionBytes <= maxBytes && c.total + item.bytes <= MAX_REQUEST_BYTES) break;
    }
    if (at === chunks.length) chunks.push({ items: [], total: 0, perPartition: new Map() });
    const target = chunks[at]!;
    target.items.push(item);
    target.total += item.bytes;
    target.perPartition.set(key, (target.perPartition.get(key) ?? BATCH_OVERHEAD) + item.bytes);
    latest.set(key, at);
  }
  return chunks.map((c) => c.items);
}

// --- outcomes -----------------------------------------------------------------------------------

function partitionError(code: number, topic: string, partition: number, cause: unknown): PublishError {
  const reason = PERMANENT_CODES.get(code);
  if (reason !== undefined) {
    return new PublishError(`Kafka refused the message for ${topic}[${partition}]: ${reason}`, {
      retryable: false,
      cause,
    });
  }
  return new PublishError(
    `Kafka could not store the message for ${topic}[${partition}] yet (error ${code})`,
    {
      retryable: true,
      cause,
    },
  );
}

interface Verdicts {
  /** `topic:partition` the broker acknowledged (in any attempt). */
  readonly delivered: Set<string>;
  /** `topic:partition` → the error code of its last failed attempt. */
  readonly failed: Map<string, number>;
}

/**
 * The per-partition results a failed send carries: the produce responses of every attempt
 * (a ResponseError's `response`) and the offsets of the requests that succeeded (`produced`).
 */
function partitionVerdicts(error: unknown): Verdicts {
  const delivered = new Set<string>();
  const failedCodes = new Map<string, number>();
  visit(error, (node) => {
    const produced = (node as { produced?: { offsets?: { topic: string; partition: number }[] } }).produced;
    for (const o of produced?.offsets ?? []) delivered.add(`${o.topic}:${o.partition}`);
    const response = (node as { response?: unknown }).response as
      | { responses?: { name: string; partitionResponses?: { index: number; errorCode: number }[] }[] }
      | undefined;
    for (const topic of response?.responses ?? []) {
      for (const p of topic.partitionResponses ?? []) {
        const key = `${topic.name}:${p.index}`;
        if (p.errorCode === 0) delivered.add(key);
        else failedCodes.set(key, p.errorCode);
      }
    }
  });
  for (const key of delivered) failedCodes.delete(key);
  return { delivered, failed: failedCodes };
}

/** Depth-first over an error and its `errors` (MultipleErrors) and `cause` chain, in order. */
function visit(error: unknown, fn: (node: object) => void, depth = 0): void {
  if (typeof error !== 'object' || error === null || depth > 8) return;
  fn(error);
  const children = (error as { errors?: unknown }).errors;
  if (Array.isArray(children)) for (const child of children) visit(child, fn, depth + 1);
  visit((error as { cause?: unknown }).cause, fn, depth + 1);
}

/** Kafka protocol error codes anywhere in an error tree. */
function protocolCodes(error: unknown): number[] {
  const codes: number[] = [];
  visit(error, (node) => {
    const code = (node as { apiCode?: unknown }).apiCode;
    if (typeof code === 'number') codes.push(code);
  });
  return codes;
}

const UNREACHABLE_ERRNO: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/**
 * The verdict on a failure of a whole call (no per-partition answer): a permanent Kafka code
 * that is not partition-specific, the brokers being unreachable, or something retryable.
 */
function classify(error: unknown, what: string): PublishError {
  let unreachable = false;
  let authentication = false;
  let permanentCode: number | undefined;
  visit(error, (node) => {
    const code = (node as { code?: unknown }).code;
    // PLT_KFK_TIMEOUT: a request the broker never answered (see deadline()).
    if (
      code === 'PLT_KFK_NETWORK' ||
      code === 'PLT_KFK_TIMEOUT' ||
      (typeof code === 'string' && UNREACHABLE_ERRNO.has(code))
    ) {
      unreachable = true;
    }
    if (code === 'PLT_KFK_AUTHENTICATION') authentication = true;
    if (/Client is closed|Connection pool is closed|Cannot connect to any broker/.test(errorMessage(node))) {
      unreachable = true;
    }
    const apiCode = (node as { apiCode?: unknown }).apiCode;
    const path = (node as { path?: unknown }).path;
    const partitionLevel = typeof path === 'string' && path.includes('partition');
    if (typeof apiCode === 'number' && PERMANENT_CODES.has(apiCode) && !partitionLevel)
      permanentCode = apiCode;
  });
  const detail = deepestMessage(error);
  if (permanentCode !== undefined) {
    return new PublishError(`Kafka refused ${what}: ${PERMANENT_CODES.get(permanentCode)}`, {
      retryable: false,
      cause: error,
    });
  }
  if (authentication) {
    // Credentials are configuration: the events are not at fault, so no attempt is charged.
    return new PublishError(`Kafka authentication failed: ${detail}`, {
      retryable: true,
      code: BROKER_UNAVAILABLE,
      cause: error,
    });
  }
  if (unreachable) {
    return new PublishError(`Kafka is not available (${what}): ${detail}`, {
      retryable: true,
      code: BROKER_UNAVAILABLE,
      cause: error,
    });
  }
  return new PublishError(`Kafka publish of ${what} failed: ${detail}`, { retryable: true, cause: error });
}

/** The most specific message in an error tree (the last leaf), with the top one for context. */
function deepestMessage(error: unknown): string {
  let leaf: unknown = error;
  visit(error, (node) => {
    const children = (node as { errors?: unknown }).errors;
    if (!Array.isArray(children) || children.length === 0) leaf = node;
  });
  const top = errorMessage(error);
  const deep = errorMessage(leaf);
  return deep === top ? top : `${top} (${deep})`;
}

function isBrokerUnavailableError(error: PublishError): boolean {
  return error.code === BROKER_UNAVAILABLE;
}

function isUnknownTopic(error: unknown): boolean {
  let unknown = false;
  visit(error, (node) => {
    if ((node as { apiCode?: unknown }).apiCode === 3) unknown = true;
    if (/^Unknown topic /.test(errorMessage(node))) unknown = true;
  });
  return unknown;
}

// --- small helpers ------------------------------------------------------------------------------

/** Header names repeat (ce-*, user headers): one Buffer each. */
const headerNames = new Map<string, Buffer>();

function headerName(name: string): Buffer {
  let bytes = headerNames.get(name);
  if (bytes === undefined) {
    bytes = Buffer.from(name);
    if (headerNames.size >= 1024) headerNames.clear();
    headerNames.set(name, bytes);
  }
  return bytes;
}

interface Deadline {
  /** Rejects with a PublishError when the time is up or the signal aborts; never resolves. */
  readonly promise: Promise<never>;
  dispose(): void;
}

function deadline(timeoutMs: number, signal: AbortSignal): Deadline {
  let timer: NodeJS.Timeout | undefined;
  let onAbort = (): void => undefined;
  const promise = new Promise<never>((_, reject) => {
    // Kafka answers every produce request, refusals and its own timeouts included: no answer at
    // all leaves the connection in doubt (a stall, a half-open link), the broker's fault.
    timer = setTimeout(() => {
      reject(
        new PublishError(
          `Kafka did not acknowledge within ${timeoutMs} ms: no answer, the connection is in doubt`,
          { retryable: true, code: BROKER_UNAVAILABLE },
        ),
      );
    }, timeoutMs);
    onAbort = () => {
      reject(
        new PublishError(`Publish aborted before Kafka acknowledged: ${errorMessage(signal.reason)}`, {
          retryable: true,
          cause: signal.reason,
        }),
      );
    };
  });
  promise.catch(() => undefined);
  if (signal.aborted) onAbort();
  else signal.addEventListener('abort', onAbort, { once: true });
  return {
    promise,
    dispose: () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    },
  };
}
