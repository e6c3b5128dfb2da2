/**
 * NATS JetStream consumer adapter: a durable pull consumer (explicit ack, unlimited
 * redelivery) whose messages go through the inbox. Each delivery is read from its
 * CloudEvents headers, handled through a KeyedQueue keyed by aggregate (bounded
 * concurrency, never two deliveries of one aggregate at once), and acknowledged only
 * after `inbox.handle` resolved — that is, after the inbox transaction committed.
 * `deferred` is answered with `nak(delay)` (redelivered later: `deferMs`, doubling with each
 * deferral in a row up to `deferCapMs`, see ./defer.ts); every other status is
 * acked. A message without a tx-outbox envelope cannot be deduplicated nor quarantined
 * (it has no event id): it is terminated (`term`) and logged.
 */
import {
  AckPolicy,
  type ConsumerMessages,
  DeliverPolicy,
  type JsMsg,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream';
import { connect, type NatsConnection, type NodeConnectionOptions, nanos } from '@nats-io/transport-node';
import { errorMessage } from '../errors.js';
import type { Inbox, InboxHandler } from '../inbox/inbox.js';
import { fromEnvelope, type InboxMessage } from '../inbox/message.js';
import { type Logger, silentLogger } from '../logger.js';
import { checkExactlyOne, checkInboxAndHandler, checkIntegers, checkNames } from '../options/checks.js';
import { apiErrorCode } from '../publishers/nats/classify.js';
import { aggregateKey, type Consumer } from './consumer.js';
import { type DeferPolicy, deferDelay, deferPolicy } from './defer.js';
import { KeyedQueue } from './keyed-queue.js';

export type { Consumer } from './consumer.js';

export interface NatsConsumerOptions<T = unknown> {
  readonly inbox: Inbox<T>;
  readonly handler: InboxHandler<T>;
  /** Server URL(s); the adapter owns (and closes) this connection. */
  readonly servers?: string | string[];
  /** An existing connection instead of `servers`; never closed by the adapter. */
  readonly connection?: NatsConnection;
  readonly connectionOptions?: Omit<NodeConnectionOptions, 'servers'>;
  /** The JetStream stream to consume (it must exist). */
  readonly stream: string;
  /** Durable consumer name: created, or updated to this configuration. */
  readonly durable: string;
  readonly filterSubject?: string;
  /** Deliveries handled at once (across aggregates). Default 16. */
  readonly concurrency?: number;
  /** Redelivery delay of a deferred delivery, in ms; it doubles with each deferral in a row. Default 1000. */
  readonly deferMs?: number;
  /** Upper bound of that delay, in ms. Default 10 000. */
  readonly deferCapMs?: number;
  /** Ack wait of the durable consumer, in ms: an unacked delivery is redelivered after it. Default 30 000. */
  readonly ackWaitMs?: number;
  /** Aborting it stops the consumer (like `stop()`). */
  readonly signal?: AbortSignal;
  readonly logger?: Logger;
}

const CONSUMER_NOT_FOUND = 10014;

/**
 * Consumes a JetStream stream through the inbox.
 *
 * @example
 * const consumer = await consumeNats({ inbox, handler, servers: 'nats://127.0.0.1:4222', stream: 'ORDERS', durable: 'inventory' });
 * // …
 * await consumer.stop();
 */
export async function consumeNats<T = unknown>(options: NatsConsumerOptions<T>): Promise<Consumer> {
  validate(options);
  const logger = options.logger ?? silentLogger;
  const concurrency = options.concurrency ?? 16;
  const defer = deferPolicy(options);
  const owned = options.connection === undefined;
  const nc =
    options.connection ?? (await connect({ ...options.connectionOptions, servers: options.servers! }));
  try {
    await ensureConsumer(nc, options);
    const consumer = await jetstream(nc).consumers.get(options.stream, options.durable);
    const messages = await consumer.consume({ max_messages: concurrency * 2 });
    const adapter = new NatsConsumer(nc, owned, messages, options, logger, concurrency, defer);
    adapter.start();
    return adapter;
  } catch (error) {
    if (owned) await nc.close().catch(() => undefined);
    throw error;
  }
}

function validate(options: NatsConsumerOptions<never>): void {
  checkInboxAndHandler(options);
  const hasServers = options.servers !== undefined && options.servers.length > 0;
  checkExactlyOne('servers', 'connection', hasServers, options.connection !== undefined);
  checkNames(options, ['stream', 'durable']);
  checkIntegers(options, { concurrency: 1, deferMs: 0, deferCapMs: 0, ackWaitMs: 1 });
}

async function ensureConsumer(nc: NatsConnection, o: NatsConsumerOptions<never>): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const update = {
    ack_wait: nanos(o.ackWaitMs ?? 30_000),
    max_deliver: -1,
    ...(o.filterSubject !== undefined ? { filter_subject: o.filterSubject } : {}),
  };
  try {
    await jsm.consumers.info(o.stream, o.durable);
    await jsm.consumers.update(o.stream, o.durable, update);
    return;
  } catch (error) {
    if (apiErrorCode(error) !== CONSUMER_NOT_FOUND) throw error;
  }
  await jsm.consumers.add(o.stream, {
    ...update,
    durable_name: o.durable,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
  });
}

class NatsConsumer<T> implements Consumer {
  readonly #queue: KeyedQueue;
  readonly #inFlight = new Set<Promise<void>>();
  #loop: Promise<void> | undefined;
  #stopping: Promise<void> | undefined;
  readonly #onAbort = (): void => void this.stop();

  constructor(
    private readonly nc: NatsConnection,
    private readonly owned: boolean,
    private readonly messages: ConsumerMessages,
    private readonly o: NatsConsumerOptions<T>,
    private readonly logger: Logger,
    private readonly concurrency: number,
    private readonly defer: DeferPolicy,
  ) {
    this.#queue = new KeyedQueue(concurrency);
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
    await this.messages.close().catch(() => undefined);
    await this.#loop;
    await Promise.all(this.#inFlight);
    if (this.owned) await this.nc.drain().catch(() => undefined);
    else await this.nc.flush().catch(() => undefined);
  }

  async #run(): Promise<void> {
    try {
      for await (const msg of this.messages) {
        if (this.#stopping) {
          msg.nak();
          continue;
        }
        const task = this.#deliver(msg);
        this.#inFlight.add(task);
        void task.finally(() => this.#inFlight.delete(task));
        // Backpressure: never more than twice the concurrency handled or waiting.
        while (this.#inFlight.size >= this.concurrency * 2) await Promise.race(this.#inFlight);
      }
    } catch (error) {
      if (!this.#stopping) this.logger.error({ err: error, stream: this.o.stream }, 'NATS consumer stopped');
    }
  }

  async #deliver(msg: JsMsg): Promise<void> {
    let message: InboxMessage;
    try {
      const headers: Record<string, string> = {};
      for (const name of msg.headers?.keys() ?? []) headers[name] = msg.headers!.get(name);
      message = fromEnvelope(headers, msg.data);
    } catch (error) {
      const reason = `no tx-outbox envelope: ${errorMessage(error)}`;
      this.logger.error(
        { stream: this.o.stream, subject: msg.subject, streamSeq: msg.seq, reason },
        'message terminated',
      );
      // No reason on the wire: `+TERM <reason>` needs NATS 2.10.4+ (older servers ignore it).
      msg.term();
      return;
    }
    try {
      const result = await this.#queue.run(aggregateKey(message), () =>
        this.o.inbox.handle(message, this.o.handler),
      );
      if (result.status === 'deferred') msg.nak(deferDelay(this.defer, result.attempts));
      else msg.ack();
    } catch (error) {
      // The inbox itself failed (database down …): nothing was committed, redeliver later.
      this.logger.error({ err: error, eventId: message.eventId }, 'inbox failed; redelivering later');
      msg.nak(this.defer.deferMs);
    }
  }
}
