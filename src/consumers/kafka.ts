/**
 * Apache Kafka consumer adapter, on @platformatic/kafka: a consumer group member reading one
 * topic (from the earliest offset when the group has none committed) whose records go through
 * the inbox. Each record is read from its CloudEvents headers, handled through a KeyedQueue keyed
 * by aggregate (bounded concurrency, never two records of one aggregate at once), and its offset
 * becomes committable only after `inbox.handle` resolved. Per partition, the adapter commits only
 * the offset below which every record was handled, so a restart redelivers whatever was not.
 * A `deferred` record is handled again in process after `deferMs` until the inbox answers
 * otherwise (its offset stays uncommitted meanwhile). A record without a tx-outbox envelope cannot
 * be deduplicated nor quarantined: it is logged and counted as handled.
 */
import { Consumer as KafkaClient, type Message, type MessagesStream } from '@platformatic/kafka';
import { errorMessage, OutboxValidationError } from '../errors.js';
import type { Inbox, InboxHandler } from '../inbox/inbox.js';
import { fromEnvelope, type InboxMessage } from '../inbox/message.js';
import { type Logger, silentLogger } from '../logger.js';
import { KeyedQueue } from './keyed-queue.js';
import { aggregateKey, type Consumer } from './nats.js';
import { checkInboxAndHandler, checkIntegers, checkNames } from './options.js';

export type { Consumer } from './nats.js';

type KafkaMessage = Message<Buffer, Buffer, Buffer, Buffer>;
type KafkaStream = MessagesStream<Buffer, Buffer, Buffer, Buffer>;

export interface KafkaConsumerOptions<T = unknown> {
  readonly inbox: Inbox;
  readonly handler: InboxHandler<T>;
  /** Bootstrap brokers, `host:port`. The adapter owns (and closes) its client. */
  readonly brokers: readonly string[];
  readonly topic: string;
  /** Consumer group: its committed offsets say where to resume. */
  readonly groupId: string;
  /** Client id shown in broker logs. Default `tx-outbox`. */
  readonly clientId?: string;
  /** Records handled at once (across aggregates). Default 16. */
  readonly concurrency?: number;
  /** Delay before a deferred record is handled again, in ms. Default 1000. */
  readonly deferMs?: number;
  /** Aborting it stops the consumer (like `stop()`). */
  readonly signal?: AbortSignal;
  readonly logger?: Logger;
}

/**
 * Consumes a Kafka topic through the inbox.
 *
 * @example
 * const consumer = await consumeKafka({ inbox, handler, brokers: ['127.0.0.1:9092'], topic: 'order.created', groupId: 'inventory' });
 * // …
 * await consumer.stop();
 */
export async function consumeKafka<T = unknown>(options: KafkaConsumerOptions<T>): Promise<Consumer> {
  validate(options);
  const client = new KafkaClient<Buffer, Buffer, Buffer, Buffer>({
    clientId: options.clientId ?? 'tx-outbox',
    groupId: options.groupId,
    bootstrapBrokers: [...options.brokers],
    autocommit: false,
  });
  try {
    const stream = await client.consume({
      topics: [options.topic],
      mode: 'committed',
      fallbackMode: 'earliest',
      autocommit: false,
    });
    const adapter = new KafkaConsumer(client, stream, options);
    adapter.start();
    return adapter;
  } catch (error) {
    await client.close().catch(() => undefined);
    throw error;
  }
}

function validate(options: KafkaConsumerOptions<never>): void {
  checkInboxAndHandler(options);
  if (!Array.isArray(options.brokers) || options.brokers.length === 0)
    throw new OutboxValidationError('brokers', 'is missing', 'Give at least one host:port.');
  checkNames(options, ['topic', 'groupId']);
  checkIntegers(options, { concurrency: 1, deferMs: 0 });
}

/** Offsets of one partition received and not yet committed, in order, with their handled flag. */
interface PartitionState {
  readonly pending: Array<{ offset: bigint; handled: boolean }>;
  /** Next offset to commit (last handled contiguous offset + 1), if it moved since the last commit. */
  commitable: bigint | undefined;
}

class KafkaConsumer<T> implements Consumer {
  readonly #queue: KeyedQueue;
  readonly #inFlight = new Set<Promise<void>>();
  readonly #partitions = new Map<number, PartitionState>();
  readonly #logger: Logger;
  readonly #concurrency: number;
  readonly #deferMs: number;
  #commits: Promise<void> = Promise.resolve();
  #loop: Promise<void> | undefined;
  #stopping: Promise<void> | undefined;
  readonly #onAbort = (): void => void this.stop();

  constructor(
    private readonly client: KafkaClient<Buffer, Buffer, Buffer, Buffer>,
    private readonly stream: KafkaStream,
    private readonly o: KafkaConsumerOptions<T>,
  ) {
    this.#logger = o.logger ?? silentLogger;
    this.#concurrency = o.concurrency ?? 16;
    this.#deferMs = o.deferMs ?? 1000;
    this.#queue = new KeyedQueue(this.#concurrency);
  }

  start(): void {
    this.#loop = this.#run();
    if (this.o.signal?.aborted) void this.stop();
    else this.o.signal?.addEventListener('abort', this.#onAbort, { once: true });
  }

  stop(): Promise<void> {
    this.#stopping ??= this.#shutdown();
    return this.#stopping;
  }

  async #shutdown(): Promise<void> {
    this.o.signal?.removeEventListener('abort', this.#onAbort);
    await this.stream.close().catch(() => undefined);
    await this.#loop;
    await Promise.all(this.#inFlight);
    this.#scheduleCommit();
    await this.#commits;
    await this.client.close().catch(() => undefined);
  }

  async #run(): Promise<void> {
    try {
      for await (const record of this.stream as AsyncIterable<KafkaMessage>) {
        // Not tracked: never committed, redelivered to whoever consumes the partition next.
        if (this.#stopping) continue;
        const entry = { offset: record.offset, handled: false };
        this.#partition(record.partition).pending.push(entry);
        const task = this.#deliver(record).then((handled) => {
          if (!handled) return;
          entry.handled = true;
          this.#advance(record.partition);
        });
        this.#inFlight.add(task);
        void task.finally(() => this.#inFlight.delete(task));
        // Backpressure: never more than twice the concurrency handled or waiting.
        while (this.#inFlight.size >= this.#concurrency * 2) await Promise.race(this.#inFlight);
      }
    } catch (error) {
      if (!this.#stopping) this.#logger.error({ err: error, topic: this.o.topic }, 'Kafka consumer stopped');
    }
  }

  #partition(partition: number): PartitionState {
    let state = this.#partitions.get(partition);
    if (!state) {
      state = { pending: [], commitable: undefined };
      this.#partitions.set(partition, state);
    }
    return state;
  }

  /** Moves the partition's commit point over the handled prefix and commits it. */
  #advance(partition: number): void {
    const state = this.#partition(partition);
    let moved = false;
    while (state.pending.length > 0 && state.pending[0]!.handled) {
      state.commitable = state.pending.shift()!.offset + 1n;
      moved = true;
    }
    if (moved) this.#scheduleCommit();
  }

  /** Commits every partition whose commit point moved; commits run one after another. */
  #scheduleCommit(): void {
    this.#commits = this.#commits.then(async () => {
      const offsets = [];
      for (const [partition, state] of this.#partitions) {
        if (state.commitable === undefined) continue;
        offsets.push({ topic: this.o.topic, partition, offset: state.commitable, leaderEpoch: -1 });
        state.commitable = undefined;
      }
      if (offsets.length === 0) return;
      try {
        await this.client.commit({ offsets });
      } catch (error) {
        // Not fatal: a later commit covers these offsets; at worst a restart redelivers them.
        this.#logger.warn({ err: error, topic: this.o.topic }, 'Kafka offset commit failed');
      }
    });
  }

  /** Resolves with false when stop() abandoned a deferred record (its offset stays uncommitted). */
  async #deliver(record: KafkaMessage): Promise<boolean> {
    let message: InboxMessage;
    try {
      const headers: Record<string, string> = {};
      for (const [name, value] of record.headers ?? []) headers[name.toString()] = value.toString();
      message = fromEnvelope(headers, record.value ?? Buffer.alloc(0));
    } catch (error) {
      this.#logger.error(
        {
          topic: record.topic,
          partition: record.partition,
          offset: record.offset.toString(),
          reason: `no tx-outbox envelope: ${errorMessage(error)}`,
        },
        'record skipped',
      );
      return true;
    }
    for (;;) {
      try {
        const result = await this.#queue.run(aggregateKey(message), () =>
          this.o.inbox.handle(message, this.o.handler),
        );
        if (result.status !== 'deferred') return true;
      } catch (error) {
        // The inbox itself failed (database down …): nothing was committed, try again later.
        this.#logger.error({ err: error, eventId: message.eventId }, 'inbox failed; handling again later');
      }
      // Stopping: leave it uncommitted, so that the next consumer of the partition gets it again.
      if (this.#stopping) return false;
      await new Promise((resolve) => setTimeout(resolve, this.#deferMs));
      if (this.#stopping) return false;
    }
  }
}
