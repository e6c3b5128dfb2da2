/**
 * Apache Kafka consumer adapter, on @platformatic/kafka: a consumer group member reading one
 * topic (from the earliest offset when the group has none committed) whose records go through
 * the inbox. Each record is read from its CloudEvents headers, handled through a KeyedQueue keyed
 * by aggregate (bounded concurrency, never two records of one aggregate at once), and its offset
 * becomes committable only after `inbox.handle` resolved. Per partition, the adapter commits only
 * the offset below which every record was handled, so a restart redelivers whatever was not.
 * A `deferred` record is handled again in process after `deferMs` (doubling with each deferral
 * in a row, up to `deferCapMs`) until the inbox answers
 * otherwise (its offset stays uncommitted meanwhile). A record without a tx-outbox envelope cannot
 * be deduplicated nor quarantined: it is logged and counted as handled.
 *
 * Rebalances: when the group starts rebalancing, the handled prefixes are committed (best effort),
 * and again when this member joins the new generation. A partition it keeps keeps its
 * bookkeeping: the stream re-reads it from the committed offset and what was received already is
 * skipped (offsets only grow), so the handled prefix stays in arrival order. A partition it lost
 * is forgotten: its records still being handled commit nothing and its deferred records are
 * abandoned (the new owner reads them again). A partition it gained starts where the stream
 * says after the join (its 'offsets' event); records of it fetched before are skipped. A record
 * of a partition not assigned to this member is never handled nor committed, and commit points
 * never move backwards (the client library itself may resend a commit after rejoining the group:
 * at worst a redelivery, which the inbox answers `duplicate`).
 */
import { Consumer as KafkaClient, type Message, type MessagesStream } from '@platformatic/kafka';
import { errorMessage, OutboxValidationError } from '../errors.js';
import type { Inbox, InboxHandler } from '../inbox/inbox.js';
import { fromEnvelope, type InboxMessage } from '../inbox/message.js';
import { type Logger, silentLogger } from '../logger.js';
import { checkInboxAndHandler, checkIntegers, checkNames } from '../options/checks.js';
import { sleep } from '../sleep.js';
import { aggregateKey, type Consumer } from './consumer.js';
import { type DeferPolicy, deferDelay, deferPolicy } from './defer.js';
import { KeyedQueue } from './keyed-queue.js';

export type { Consumer } from './consumer.js';

type KafkaMessage = Message<Buffer, Buffer, Buffer, Buffer>;
type KafkaStream = MessagesStream<Buffer, Buffer, Buffer, Buffer>;

export interface KafkaConsumerOptions<T = unknown> {
  readonly inbox: Inbox<T>;
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
  /** Delay before a deferred record is handled again, in ms; it doubles with each deferral in a row. Default 1000. */
  readonly deferMs?: number;
  /** Upper bound of that delay, in ms. Default 10 000. */
  readonly deferCapMs?: number;
  /**
   * Deferred records held in process at once, each waiting its delay (they take no handling
   * slot, so independent aggregates keep flowing); beyond it, reading pauses. Default 1000.
   */
  readonly maxDeferred?: number;
  /**
   * How long the group waits for a silent member (crashed, frozen) before its partitions go to
   * the others: a redelivery after a crash waits this long. Kafka's broker bounds it (by default
   * 6 000 to 300 000 ms). Default 30 000 (the client library's own default is 60 000).
   */
  readonly sessionTimeoutMs?: number;
  /** Heartbeats to the group coordinator, ms; well below `sessionTimeoutMs`. Default a sixth of it. */
  readonly heartbeatIntervalMs?: number;
  /** How long a rebalance waits for members to rejoin, ms. Default 60 000. */
  readonly rebalanceTimeoutMs?: number;
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
  const sessionTimeout = options.sessionTimeoutMs ?? 30_000;
  const client = new KafkaClient<Buffer, Buffer, Buffer, Buffer>({
    clientId: options.clientId ?? 'tx-outbox',
    groupId: options.groupId,
    bootstrapBrokers: [...options.brokers],
    autocommit: false,
    sessionTimeout,
    heartbeatInterval: options.heartbeatIntervalMs ?? Math.floor(sessionTimeout / 6),
    rebalanceTimeout: options.rebalanceTimeoutMs ?? 60_000,
  });
  try {
    const open = (): Promise<KafkaStream> =>
      client.consume({
        topics: [options.topic],
        mode: 'committed',
        fallbackMode: 'earliest',
        autocommit: false,
      });
    const adapter = new KafkaConsumer(client, await open(), open, options);
    adapter.start();
    return adapter;
  } catch (error) {
    await client.close().catch(() => undefined);
    throw error;
  }
}

/** Delay before the first attempt to open a new stream after the stream failed; doubles up to the cap. */
const REOPEN_BASE_MS = 500;
const REOPEN_CAP_MS = 5_000;

function validate(options: KafkaConsumerOptions<never>): void {
  checkInboxAndHandler(options);
  if (!Array.isArray(options.brokers) || options.brokers.length === 0)
    throw new OutboxValidationError('brokers', 'is missing', 'Give at least one host:port.');
  checkNames(options, ['topic', 'groupId']);
  checkIntegers(options, {
    concurrency: 1,
    deferMs: 0,
    deferCapMs: 0,
    maxDeferred: 1,
    sessionTimeoutMs: 1,
    heartbeatIntervalMs: 1,
    rebalanceTimeoutMs: 1,
  });
  const session = options.sessionTimeoutMs ?? 30_000;
  if (options.heartbeatIntervalMs !== undefined && options.heartbeatIntervalMs >= session)
    throw new OutboxValidationError(
      'heartbeatIntervalMs',
      `is ${options.heartbeatIntervalMs}, not below sessionTimeoutMs (${session})`,
      'Use a third of sessionTimeoutMs or less.',
    );
}

/** Offsets of one partition received and not yet committed, in order, with their handled flag. */
interface PartitionState {
  readonly pending: Array<{ offset: bigint; handled: boolean }>;
  /** Next offset to commit (last handled contiguous offset + 1), if it moved since the last commit. */
  commitable: bigint | undefined;
  /** Highest offset committed (or on its way): commit points only move forward. */
  committed: bigint;
  /** Highest offset received: a re-read of the partition skips up to here. */
  highest: bigint;
  /** Gained in a rebalance and nothing received yet: starts where the stream's next 'offsets' says. */
  gained: boolean;
}

function newState(highest: bigint, gained: boolean): PartitionState {
  return { pending: [], commitable: undefined, committed: -1n, highest, gained };
}

/** A commit point taken out of a partition's bookkeeping, on its way to the broker. */
interface CommitEntry {
  readonly partition: number;
  readonly state: PartitionState;
  readonly offset: bigint;
  /** The partition's commit point before this one. */
  readonly previous: bigint;
}

const COMMIT_RETRY_MS = 500;

class KafkaConsumer<T> implements Consumer {
  readonly #queue: KeyedQueue;
  readonly #inFlight = new Set<Promise<void>>();
  readonly #partitions = new Map<number, PartitionState>();
  readonly #logger: Logger;
  readonly #concurrency: number;
  readonly #defer: DeferPolicy;
  /** Aborted by stop(): deferred records stop waiting. */
  readonly #halt = new AbortController();
  readonly #maxDeferred: number;
  /** Deferred records waiting for their next attempt. */
  #deferred = 0;
  /** Resolvers of the reading loop waiting for room (a record finished or was deferred). */
  #roomWaiters: Array<() => void> = [];
  #commits: Promise<void> = Promise.resolve();
  #loop: Promise<void> | undefined;
  #stopping: Promise<void> | undefined;
  readonly #onAbort = (): void => void this.stop();
  /**
   * The client gave up rejoining the group (its retries ran out while the broker was away) and
   * says so with an 'error' event — fatal to the process if nobody listens. The membership is
   * lost: end the stream, so that a new one joins the group again.
   */
  readonly #onClientError = (error: unknown): void => {
    if (this.#stopping) return;
    this.#logger.warn({ err: error, topic: this.o.topic }, 'Kafka consumer lost its group membership');
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
    const entries = this.#collect();
    for (const partition of this.#partitions.keys())
      if (!this.#assigned(partition)) this.#partitions.delete(partition);
    this.#joined = true;
    this.#commits = this.#commits.then(() => this.#commit(entries));
  };
  /**
   * The stream settled where it reads each assigned partition from: a gained partition starts
   * there. Records already buffered by then were fetched before (under an older assignment):
   * for a gained partition they are skipped.
   */
  readonly #onOffsets = (): void => {
    if (!this.#joined) return;
    const gained = new Set<PartitionState>();
    for (const partition of this.#assignedPartitions()) {
      const existing = this.#partitions.get(partition);
      // Kept, and already reading: its bookkeeping goes on.
      if (existing && !existing.gained) continue;
      // Gained, nothing received yet: (again) from where the stream now reads it.
      const from = this.#stream.offsetsToFetch.get(`${this.o.topic}:${partition}`);
      const state = existing ?? newState(-1n, true);
      state.highest = from === undefined ? -1n : from - 1n;
      this.#partitions.set(partition, state);
      gained.add(state);
    }
    this.#stale = { left: this.#stream.readableLength, gained };
  };
  /** Since the last join, partitions gained get their bookkeeping from the 'offsets' event only. */
  #joined = false;
  /** Records still buffered from before the last 'offsets' event, and the partitions it gained. */
  #stale: { left: number; gained: Set<PartitionState> } = { left: 0, gained: new Set() };
  /** A commit retry after a failed commit. */
  #retry: NodeJS.Timeout | undefined;
  /** The stream records come from; replaced when it fails (the client gave up fetching). */
  #stream: KafkaStream;

  constructor(
    private readonly client: KafkaClient<Buffer, Buffer, Buffer, Buffer>,
    stream: KafkaStream,
    private readonly open: () => Promise<KafkaStream>,
    private readonly o: KafkaConsumerOptions<T>,
  ) {
    this.#logger = o.logger ?? silentLogger;
    this.#concurrency = o.concurrency ?? 16;
    this.#defer = deferPolicy(o);
    this.#maxDeferred = o.maxDeferred ?? 1000;
    this.#queue = new KeyedQueue(this.#concurrency);
    this.#stream = stream;
  }

  start(): void {
    this.client.on('error', this.#onClientError);
    this.client.on('consumer:group:rebalance', this.#onRebalance);
    this.client.on('consumer:group:join', this.#onJoin);
    this.#stream.on('offsets', this.#onOffsets);
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
    this.#halt.abort();
    await this.#stream.close().catch(() => undefined);
    await this.#loop;
    await Promise.all(this.#inFlight);
    // The last commit, tried a few times (a rebalance may be refusing commits just now).
    for (let attempt = 0; attempt < 3; attempt += 1) {
      this.#scheduleCommit();
      await this.#commits;
      clearTimeout(this.#retry);
      if (![...this.#partitions.values()].some((p) => p.commitable !== undefined)) break;
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
    while (!this.#stopping) {
      try {
        await this.#read();
        if (this.#stopping) return;
        this.#logger.warn({ topic: this.o.topic }, 'Kafka consumer stream ended; opening a new one');
      } catch (error) {
        if (this.#stopping) return;
        this.#logger.warn(
          { err: error, topic: this.o.topic },
          'Kafka consumer stream failed; opening a new one',
        );
      }
      for (;;) {
        await sleep(delay, this.#halt.signal);
        delay = Math.min(REOPEN_CAP_MS, delay * 2);
        if (this.#stopping) return;
        try {
          const stream = await this.open();
          this.#stream.off('offsets', this.#onOffsets);
          this.#stream = stream;
          stream.on('offsets', this.#onOffsets);
          if (this.#stopping) await stream.close().catch(() => undefined);
          break;
        } catch (error) {
          this.#logger.warn(
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
      if (this.#stopping) continue;
      const state = this.#accept(record);
      if (!state) continue;
      const entry = { offset: record.offset, handled: false };
      state.pending.push(entry);
      state.highest = record.offset;
      state.gained = false;
      const task = this.#deliver(record, state).then((handled) => {
        if (!handled) return;
        entry.handled = true;
        this.#advance(record.partition, state);
      });
      this.#inFlight.add(task);
      void task.finally(() => {
        this.#inFlight.delete(task);
        this.#room();
      });
      // Backpressure: never more than twice the concurrency handled or waiting for a slot, nor
      // more than maxDeferred deferred ones.
      while (
        this.#inFlight.size - this.#deferred >= this.#concurrency * 2 ||
        this.#deferred >= this.#maxDeferred
      )
        await new Promise<void>((resolve) => this.#roomWaiters.push(resolve));
    }
  }

  /**
   * The bookkeeping a record goes into, or undefined when it is not to be handled here: not this
   * member's partition (its owner handles it), received already (a re-read after a rebalance),
   * or fetched before this member gained the partition.
   */
  #accept(record: KafkaMessage): PartitionState | undefined {
    const stale = this.#stale.left > 0;
    if (stale) this.#stale.left -= 1;
    if (!this.#assigned(record.partition)) return undefined;
    let state = this.#partitions.get(record.partition);
    if (!state) {
      // Gained in a rebalance: wait for the stream's 'offsets' event to say where it starts.
      if (this.#joined) return undefined;
      state = newState(-1n, false);
      this.#partitions.set(record.partition, state);
    }
    if (stale && this.#stale.gained.has(state)) return undefined;
    if (record.offset <= state.highest) return undefined;
    return state;
  }

  #assignedPartitions(): number[] {
    return this.client.assignments?.find((a) => a.topic === this.o.topic)?.partitions ?? [];
  }

  /** Whether the group assigned the partition to this member (before any assignment: yes). */
  #assigned(partition: number): boolean {
    return !this.client.assignments || this.#assignedPartitions().includes(partition);
  }

  /**
   * Whether `state` is still the partition's bookkeeping: false once a rebalance took the
   * partition away (it commits nothing any more, its deferred records are abandoned).
   */
  #current(partition: number, state: PartitionState): boolean {
    return this.#partitions.get(partition) === state;
  }

  #room(): void {
    const waiters = this.#roomWaiters;
    this.#roomWaiters = [];
    for (const resolve of waiters) resolve();
  }

  /** Moves the partition's commit point over the handled prefix and commits it. */
  #advance(partition: number, state: PartitionState): void {
    if (!this.#current(partition, state)) return;
    let moved = false;
    while (state.pending.length > 0 && state.pending[0]!.handled) {
      state.commitable = state.pending.shift()!.offset + 1n;
      moved = true;
    }
    if (moved) this.#scheduleCommit();
  }

  /** Commits every partition whose commit point moved; commits run one after another. */
  #scheduleCommit(): void {
    // Collected when the commit runs, so that commit points moved meanwhile go in the same request.
    this.#commits = this.#commits.then(() => this.#commit(this.#collect()));
  }

  /** Takes the moved commit points out of the partitions' bookkeeping. */
  #collect(): CommitEntry[] {
    const entries: CommitEntry[] = [];
    for (const [partition, state] of this.#partitions) {
      const offset = state.commitable;
      state.commitable = undefined;
      if (offset === undefined || offset <= state.committed || !this.#assigned(partition)) continue;
      entries.push({ partition, state, offset, previous: state.committed });
      state.committed = offset;
    }
    return entries;
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
      this.#logger.warn({ err: error, topic: this.o.topic }, 'Kafka offset commit failed; retrying');
      let restored = false;
      for (const e of entries) {
        if (!this.#current(e.partition, e.state)) continue;
        if (e.state.committed === e.offset) e.state.committed = e.previous;
        if (e.state.commitable === undefined || e.state.commitable < e.offset) e.state.commitable = e.offset;
        restored = true;
      }
      // Stopping: the shutdown retries the last commit itself.
      if (restored && !this.#stopping) {
        clearTimeout(this.#retry);
        this.#retry = setTimeout(() => this.#scheduleCommit(), COMMIT_RETRY_MS);
      }
    }
  }

  /**
   * Resolves with false when stop() or a rebalance abandoned a deferred record (its offset stays
   * uncommitted: whoever owns the partition next reads it again).
   */
  async #deliver(record: KafkaMessage, state: PartitionState): Promise<boolean> {
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
      let delay = this.#defer.deferMs;
      try {
        const result = await this.#queue.run(aggregateKey(message), () =>
          this.o.inbox.handle(message, this.o.handler),
        );
        if (result.status !== 'deferred') return true;
        delay = deferDelay(this.#defer, result.attempts);
      } catch (error) {
        // The inbox itself failed (database down …): nothing was committed, try again later.
        this.#logger.error({ err: error, eventId: message.eventId }, 'inbox failed; handling again later');
      }
      // Stopping or rebalanced: leave it uncommitted, the partition's next reader gets it again.
      if (this.#stopping || !this.#current(record.partition, state)) return false;
      this.#deferred += 1;
      this.#room();
      try {
        await sleep(delay, this.#halt.signal);
      } finally {
        this.#deferred -= 1;
      }
      if (this.#stopping || !this.#current(record.partition, state)) return false;
    }
  }
}
