/**
 * The Kafka consumer adapter's running part: the stream loop (reopened after a failure), the
 * handling of each record through the inbox, and the commits of what the partition bookkeeping
 * ({@link PartitionBook}) says was handled. See ./index.ts for the whole behaviour.
 */
import type { Consumer as KafkaClient, Message, MessagesStream } from '@platformatic/kafka';
import { isEnvelopeName, repeatedHeader } from '../../envelope/read.js';
import { errorMessage } from '../../errors.js';
import { fromEnvelope, type InboxMessage } from '../../inbox/message.js';
import { sleep } from '../../sleep.js';
import { noteDelivery } from '../../tracing/process-span.js';
import { handleAttempt } from '../attempt.js';
import type { Consumer } from '../consumer.js';
import { KeyedQueue } from '../keyed-queue.js';
import { ConsumerLifecycle } from '../lifecycle.js';
import type { ResolvedKafkaConsumerOptions } from './options.js';
import { type CommitEntry, PartitionBook, type Received } from './partitions.js';

type KafkaMessage = Message<Buffer, Buffer, Buffer, Buffer>;
export type KafkaStream = MessagesStream<Buffer, Buffer, Buffer, Buffer>;

/** Delay before the first attempt to open a new stream after the stream failed; doubles up to the cap. */
const REOPEN_BASE_MS = 500;
const REOPEN_CAP_MS = 5_000;
const COMMIT_RETRY_MS = 500;

export class KafkaConsumer<T, Tx> implements Consumer {
  readonly #queue: KeyedQueue;
  readonly #life: ConsumerLifecycle;
  readonly #book: PartitionBook;
  /** Deferred records waiting for their next attempt. */
  #deferred = 0;
  /** Resolvers of the reading loop waiting for room (a record finished or was deferred). */
  #roomWaiters: Array<() => void> = [];
  #commits: Promise<void> = Promise.resolve();
  #loop: Promise<void> | undefined;
  /**
   * The client gave up rejoining the group (its retries ran out while the broker was away) and
   * says so with an 'error' event — fatal to the process if nobody listens. The membership is
   * lost: end the stream, so that a new one joins the group again.
   */
  readonly #onClientError = (error: unknown): void => {
    if (this.#life.stopping) return;
    this.o.logger.warn({ err: error, topic: this.o.topic }, 'Kafka consumer lost its group membership');
    this.#stream.destroy(error instanceof Error ? error : new Error(String(error)));
  };
  /** The group is rebalancing: commit what was handled while this member still owns it. */
  readonly #onRebalance = (): void => this.#scheduleCommit();
  /**
   * A new generation: commit, and forget the partitions this member lost. The partitions it
   * keeps keep their bookkeeping: the stream re-reads them from the committed offsets, and what
   * was already received (offset at or below `highest`) is skipped, so nothing is received twice
   * and the handled prefix stays in arrival order. Partitions it gains wait for the stream's
   * next 'offsets' event (where it will read them from).
   */
  readonly #onJoin = (): void => {
    const entries = this.#book.join();
    this.#commits = this.#commits.then(() => this.#commit(entries));
  };
  /**
   * The stream settled where it reads each assigned partition from: a gained partition starts
   * there. Records already buffered by then were fetched before (under an older assignment):
   * for a gained partition they are skipped.
   */
  readonly #onOffsets = (): void =>
    this.#book.offsets(
      (partition) => this.#stream.offsetsToFetch.get(`${this.o.topic}:${partition}`),
      this.#stream.readableLength,
    );
  /** A commit retry after a failed commit. */
  #retry: NodeJS.Timeout | undefined;
  /** The stream records come from; replaced when it fails (the client gave up fetching). */
  #stream: KafkaStream;

  constructor(
    private readonly client: KafkaClient<Buffer, Buffer, Buffer, Buffer>,
    stream: KafkaStream,
    private readonly open: () => Promise<KafkaStream>,
    private readonly o: ResolvedKafkaConsumerOptions<T, Tx>,
  ) {
    this.#queue = new KeyedQueue(o.concurrency);
    this.#life = new ConsumerLifecycle(o.signal, () => this.#shutdown());
    this.#book = new PartitionBook(() =>
      this.client.assignments
        ? (this.client.assignments.find((a) => a.topic === o.topic)?.partitions ?? [])
        : undefined,
    );
    this.#stream = stream;
  }

  start(): void {
    this.client.on('error', this.#onClientError);
    this.client.on('consumer:group:rebalance', this.#onRebalance);
    this.client.on('consumer:group:join', this.#onJoin);
    this.#stream.on('offsets', this.#onOffsets);
    this.#loop = this.#run();
    this.#life.started();
  }

  stop(): Promise<void> {
    return this.#life.stop();
  }

  async #shutdown(): Promise<void> {
    await this.#stream.close().catch(() => undefined);
    await this.#loop;
    await this.#life.settled();
    // The last commit, tried a few times (a rebalance may be refusing commits just now).
    for (let attempt = 0; attempt < 3; attempt += 1) {
      this.#scheduleCommit();
      await this.#commits;
      clearTimeout(this.#retry);
      if (!this.#book.uncommitted) break;
      await new Promise((resolve) => setTimeout(resolve, COMMIT_RETRY_MS));
    }
    this.client.off('consumer:group:rebalance', this.#onRebalance);
    this.client.off('consumer:group:join', this.#onJoin);
    this.#stream.off('offsets', this.#onOffsets);
    await this.client.close().catch(() => undefined);
    this.client.off('error', this.#onClientError);
  }

  /**
   * Reads the stream; when it fails — the client gives up a fetch after its few retries, as
   * when the broker is down for more than a few seconds — a new stream is opened (rejoining the
   * group) with a growing delay, for as long as it takes: a broker outage must not end the
   * consumer. The bookkeeping carries over like a rebalance's: what was received already is
   * skipped when the new stream re-reads it from the committed offsets.
   */
  async #run(): Promise<void> {
    let delay = REOPEN_BASE_MS;
    while (!this.#life.stopping) {
      try {
        await this.#read();
        if (this.#life.stopping) return;
        this.o.logger.warn({ topic: this.o.topic }, 'Kafka consumer stream ended; opening a new one');
      } catch (error) {
        if (this.#life.stopping) return;
        this.o.logger.warn(
          { err: error, topic: this.o.topic },
          'Kafka consumer stream failed; opening a new one',
        );
      }
      for (;;) {
        await sleep(delay, this.#life.halt);
        delay = Math.min(REOPEN_CAP_MS, delay * 2);
        if (this.#life.stopping) return;
        try {
          const stream = await this.open();
          this.#stream.off('offsets', this.#onOffsets);
          this.#stream = stream;
          stream.on('offsets', this.#onOffsets);
          if (this.#life.stopping) await stream.close().catch(() => undefined);
          break;
        } catch (error) {
          this.o.logger.warn(
            { err: error, topic: this.o.topic },
            'Kafka consumer could not open a stream; retrying',
          );
        }
      }
      delay = REOPEN_BASE_MS;
    }
  }

  async #read(): Promise<void> {
    for await (const record of this.#stream as AsyncIterable<KafkaMessage>) {
      // Not tracked: never committed, redelivered to whoever consumes the partition next.
      if (this.#life.stopping) continue;
      const received = this.#book.receive(record.partition, record.offset);
      if (!received) continue;
      const task = this.#deliver(record, received).then((handled) => {
        if (handled && this.#book.handled(received)) this.#scheduleCommit();
      });
      this.#life.track(task);
      void task.finally(() => this.#room());
      // Backpressure: never more than twice the concurrency handled or waiting for a slot, nor
      // more than maxDeferred deferred ones.
      while (
        this.#life.inFlight - this.#deferred >= this.o.concurrency * 2 ||
        this.#deferred >= this.o.maxDeferred
      )
        await new Promise<void>((resolve) => this.#roomWaiters.push(resolve));
    }
  }

  #room(): void {
    const waiters = this.#roomWaiters;
    this.#roomWaiters = [];
    for (const resolve of waiters) resolve();
  }

  /** Commits every partition whose commit point moved; commits run one after another. */
  #scheduleCommit(): void {
    // Collected when the commit runs, so that commit points moved meanwhile go in the same request.
    this.#commits = this.#commits.then(() => this.#commit(this.#book.collect()));
  }

  async #commit(entries: readonly CommitEntry[]): Promise<void> {
    if (entries.length === 0) return;
    try {
      await this.client.commit({
        offsets: entries.map((e) => ({
          topic: this.o.topic,
          partition: e.partition,
          offset: e.offset,
          leaderEpoch: -1,
        })),
      });
    } catch (error) {
      // Typically a rebalance in progress. Not lost: put the commit points back (unless a newer
      // one or a new generation replaced them) and try again shortly; at worst the partition's
      // next reader redelivers what was not committed.
      this.o.logger.warn({ err: error, topic: this.o.topic }, 'Kafka offset commit failed; retrying');
      const restored = this.#book.restore(entries);
      // Stopping: the shutdown retries the last commit itself.
      if (restored && !this.#life.stopping) {
        clearTimeout(this.#retry);
        this.#retry = setTimeout(() => this.#scheduleCommit(), COMMIT_RETRY_MS);
      }
    }
  }

  /**
   * Resolves with false when stop() or a rebalance abandoned a deferred record (its offset stays
   * uncommitted: whoever owns the partition next reads it again).
   */
  async #deliver(record: KafkaMessage, received: Received): Promise<boolean> {
    let message: InboxMessage;
    try {
      message = noteDelivery(fromEnvelope(recordHeaders(record), record.value ?? Buffer.alloc(0)), {
        system: 'kafka',
        destination: record.topic,
      });
    } catch (error) {
      this.o.logger.error(
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
      // Deferred, or the inbox itself failed (nothing was committed): handle it again later.
      const delay = await handleAttempt(this.#queue, this.o, message, 'inbox failed; handling again later');
      if (delay === undefined) return true;
      // Stopping or rebalanced: leave it uncommitted, the partition's next reader gets it again.
      if (this.#life.stopping || !this.#book.isCurrent(received)) return false;
      this.#deferred += 1;
      this.#room();
      try {
        await sleep(delay, this.#life.halt);
      } finally {
        this.#deferred -= 1;
      }
      if (this.#life.stopping || !this.#book.isCurrent(received)) return false;
    }
  }
}

/**
 * A record's headers as UTF-8 strings, what `fromEnvelope` reads: the Kafka binding's `ce_*`
 * and `content-type`, or the `ce-*` of tx-outbox 0.1. Kafka allows a null header value (the
 * client hands it over as undefined): such a header is left out rather than failing the record.
 */
export function recordHeaders(record: Pick<KafkaMessage, 'headers'>): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of record.headers ?? []) {
    if (value == null) continue;
    const key = name.toString();
    // A repeated header of anyone else keeps its last value; a repeated attribute is ambiguous.
    if (Object.hasOwn(headers, key) && isEnvelopeName(key)) throw repeatedHeader(key, 'record');
    headers[key] = value.toString();
  }
  return headers;
}
