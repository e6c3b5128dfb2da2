/**
 * RabbitMQ publisher (AMQP 0-9-1 through amqplib, an optional peer dependency).
 *
 * Every message is published on a confirm channel, persistent (delivery mode 2) and
 * `mandatory`, with the event id as its AMQP `message-id`, the event type as `type`, the
 * stored content type, the creation time as `timestamp` (unix seconds) and the CloudEvents
 * envelope (`ce-*`, plus the user headers and `traceparent`) as its headers. The payload
 * bytes are sent untouched.
 *
 * A whole batch is written without waiting for each confirm (up to `maxInFlight`
 * unconfirmed messages across batches, and never past the channel's write buffer: a full
 * buffer waits for `drain`); the outcome of each message is decided by its own confirm.
 */
import {
  type Channel,
  type ChannelModel,
  type ConfirmChannel,
  connect,
  IllegalOperationError,
  type Message,
  type Options,
  type RecoveringChannelModel,
  type SocketOptions,
} from 'amqplib';
import { BROKER_UNAVAILABLE, errorMessage, OutboxValidationError, PublishError } from '../errors.js';
import { checkPositiveInteger } from '../options/checks.js';
import { redactUrl } from '../redact.js';
import { DELIVERED, failed, type OutboxMessage, type Publisher, type PublishOutcome } from './contract.js';
import { asBuffer } from './core/bytes.js';
import { connectError, publisherClosed } from './core/closed.js';
import { raceDeadline } from './core/deadline.js';
import { defaultDestination } from './core/destination.js';
import { LinkActivity } from './core/link-activity.js';
import { permanent } from './core/outcomes.js';
import { Slots } from './core/slots.js';
import { envelopeHeaders } from './envelope.js';

/** An amqplib connection: a plain one, or one made with `recovery` (it reconnects on its own). */
export type AmqpConnection = ChannelModel | RecoveringChannelModel;

/** Options of {@link rabbitmqPublisher}. Give `url` or an existing `connection`. */
export interface RabbitMqPublisherOptions {
  /**
   * Broker URL (`amqp://user:pass@host:5672/vhost`, `amqps://…`) or amqplib's connect object.
   * The publisher owns this connection: it opens it at the first publish, opens a new one at
   * the next publish after it dropped, and closes it in `close()`.
   */
  readonly url?: string | Options.Connect;
  /** Socket and client options for the connection made from `url` (TLS, heartbeat …). */
  readonly socketOptions?: SocketOptions;
  /**
   * An existing connection to use instead of `url`. The publisher opens its own confirm
   * channel on it (again after the channel closed) but never closes the connection; a plain
   * connection that dropped is not reopened (pass one made with amqplib's `recovery` for that).
   * Its `error` events are yours to listen to; the publisher listens only on its own channels.
   */
  readonly connection?: AmqpConnection;
  /**
   * Exchange to publish to: a name, or a function choosing it per message. `''` is the
   * default exchange (the routing key is then a queue name). Default `tx-outbox`.
   */
  readonly exchange?: string | ((message: OutboxMessage) => string);
  /** Routing key of a message. Default: `message.topic`, else `${aggregateType}.${type}`. */
  readonly routingKey?: (message: OutboxMessage) => string;
  /**
   * Declare every exchange used (once per channel, before its first publish) as a durable
   * `topic` exchange. Default false: the exchange must exist (it is checked passively, so a
   * missing exchange fails its messages instead of closing the channel).
   */
  readonly assertExchange?: boolean;
  /** CloudEvents `source` attribute. Default `tx-outbox`. */
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

const DEFAULT_EXCHANGE = 'tx-outbox';
const DEFAULT_SOURCE = 'tx-outbox';
const DEFAULT_TIMEOUT_MS = 10_000;
const DEFAULT_MAX_IN_FLIGHT = 1024;
/** AMQP short strings (exchange, routing key, message id) are at most 255 bytes. */
const SHORTSTR_MAX = 255;
/** amqplib encodes a message's properties (headers included) into a 64 KiB buffer. */
const PROPERTIES_BUFFER = 65_536;
const NACKED = 'message nacked';
const SIZE_REFUSAL = /message size (\d+) is larger than configured max size (\d+)/;
const NO_EXCHANGE = /no exchange '(.*)' in vhost/;
const EXCHANGE_REFUSED = /access to exchange '(.*)' in vhost '.*' refused/;

/** `message.topic`, else `${aggregateType}.${type}`. */
export const defaultRoutingKey: (message: OutboxMessage) => string = defaultDestination;

/**
 * A {@link Publisher} for RabbitMQ. Connects lazily at the first publish; after the
 * connection or channel dropped, the next publish opens a new one (a connection error never
 * crashes the process: every connection and channel it opens has its `error` listener).
 *
 * What an `{ ok: true }` outcome means: the broker confirmed the message (publisher
 * confirms) and did not return it, i.e. it was routed to at least one queue and, for
 * durable queues, written to disk (persistent message) — or, for a quorum queue, replicated
 * to a majority. That is the broker taking responsibility for it.
 *
 * Failures:
 * - **unroutable** (permanent): the message is `mandatory`, so when no queue is bound for
 *   its routing key the broker returns it (`basic.return`, 312 NO_ROUTE) instead of
 *   dropping it silently. That is a configuration problem (bind a queue, or give the
 *   exchange an alternate exchange), not something a retry cures: the event is parked
 *   dead, to be replayed once the binding exists. An exchange with an alternate exchange
 *   never returns messages; routing there counts as delivered.
 * - **too large** (permanent): a payload over `maxMessageBytes` or the broker's
 *   `max_message_size`, or headers too large for a frame.
 * - **nacked** (retryable): the broker refused to take it (e.g. a queue at its `x-max-length`
 *   with `overflow: reject-publish`, or an internal error).
 * - **exchange missing or not allowed** (retryable): it affects every event sent there, so
 *   it backs off until the exchange exists rather than killing every event at once.
 * - **broker unreachable, connection or channel closed, connection blocked by a resource
 *   alarm** (retryable, code `TXO_BROKER_UNAVAILABLE`: the relay does not charge the event
 *   an attempt). A message sent before the loss may have been stored all the same: the
 *   relay republishes it with the same `message-id` (consumers dedup, e.g. with the inbox).
 * - **no confirm within `timeoutMs`, or the batch's signal aborted** (retryable).
 *
 * `close()` is idempotent: it lets the batches in flight finish (each message settles
 * within `timeoutMs`; past that deadline they are failed as retryable), then closes the
 * channel and the connection it opened. Later publishes reject with an OutboxError
 * `TXO_PUBLISHER_CLOSED`.
 *
 * @example
 * const publisher = rabbitmqPublisher({ url: 'amqp://guest:guest@127.0.0.1:5672', exchange: 'orders', assertExchange: true });
 */
export function rabbitmqPublisher(options: RabbitMqPublisherOptions): Publisher {
  validateOptions(options);
  return new RabbitMqPublisher(options);
}

function validateOptions(options: RabbitMqPublisherOptions): void {
  const { url, connection, exchange, routingKey } = options;
  const hasUrl = url !== undefined && url !== '';
  if (!hasUrl && connection === undefined) {
    throw new OutboxValidationError('url', 'is missing', 'Give `url` (amqp://…) or a `connection`');
  }
  if (hasUrl && connection !== undefined) {
    throw new OutboxValidationError('connection', 'was given together with `url`', 'Give only one of them');
  }
  if (typeof url === 'string' && hasUrl && !/^amqps?:\/\//i.test(url)) {
    throw new OutboxValidationError(
      'url',
      `must start with amqp:// or amqps://, got ${describeUrl(url)}`,
      'Fix the URL',
    );
  }
  if (connection !== undefined && typeof connection.createConfirmChannel !== 'function') {
    throw new OutboxValidationError(
      'connection',
      'is not an amqplib connection',
      'Pass what connect() returns',
    );
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
  if (routingKey !== undefined && typeof routingKey !== 'function') {
    throw new OutboxValidationError('routingKey', 'must be a function', 'Fix the option');
  }
  checkPositiveInteger('timeoutMs', options.timeoutMs);
  checkPositiveInteger('maxInFlight', options.maxInFlight);
  checkPositiveInteger('maxMessageBytes', options.maxMessageBytes);
}

// --- state ----------------------------------------------------------------------------------

/** A message ready to publish. */
interface Item {
  readonly eventId: string;
  readonly exchange: string;
  readonly routingKey: string;
  readonly content: Buffer;
  readonly options: Options.Publish;
  /** Rough encoded size of the properties (headers included), for the frame-size check. */
  readonly propertiesBytes: number;
}

/** A connection: the one the publisher opened from `url`, or the one it was given. */
interface Link {
  readonly model: AmqpConnection;
  readonly owned: boolean;
  closed: boolean;
  /** Why the connection closed (owned connections only). */
  error: Error | undefined;
  /** The broker's reason while it blocks publishing (memory or disk alarm). */
  blocked: string | undefined;
  detach(): void;
}

/** A published message awaiting its confirm. */
interface Entry {
  readonly run: Run;
  readonly index: number;
  readonly item: Item;
  readonly deadline: number;
  /** What was heard from the broker on its channel when it was sent (see LinkActivity). */
  readonly mark: number;
  /** Set when the broker returned the message (unroutable); its confirm follows. */
  returned: Message['fields'] | undefined;
  /** Still counted against maxInFlight. */
  slot: boolean;
  /** The next in-flight message with the same message id (a republish), if any. */
  next: Entry | undefined;
}

/** One confirm channel and what is in flight on it. */
class Session {
  readonly link: Link;
  readonly channel: ConfirmChannel;
  readonly frameMax: number;
  /** In-flight messages by message id (chained when a republish overlaps): for `basic.return`. */
  readonly #byId = new Map<string, Entry>();
  /** Exchanges checked (or declared) on this channel. */
  readonly exchanges = new Set<string>();
  closed = false;
  /** The server's reason when it closed the channel. */
  error: (Error & { code?: unknown }) | undefined;
  writable = true;
  readonly #drainWaiters = new Set<(drained: boolean) => void>();

  /** Confirms, nacks and returns heard on this channel. */
  readonly activity = new LinkActivity();

  constructor(link: Link, channel: ConfirmChannel) {
    this.link = link;
    this.channel = channel;
    const frameMax = (channel.connection as { frameMax?: unknown }).frameMax;
    this.frameMax = typeof frameMax === 'number' && frameMax > 0 ? frameMax : 131_072;
    channel.on('error', (error: Error) => {
      this.error = error;
      this.closed = true;
    });
    channel.on('close', () => {
      this.closed = true;
      this.#wakeDrainWaiters(false);
    });
    channel.on('drain', () => {
      this.writable = true;
      this.#wakeDrainWaiters(true);
    });
    channel.on('return', (message: Message) => {
      this.activity.heard();
      this.#onReturn(message);
    });
  }

  track(entry: Entry): void {
    const id = entry.item.eventId;
    const head = this.#byId.get(id);
    if (head === undefined) {
      this.#byId.set(id, entry);
      return;
    }
    let tail = head;
    while (tail.next !== undefined) tail = tail.next;
    tail.next = entry;
  }

  untrack(entry: Entry): void {
    const id = entry.item.eventId;
    const head = this.#byId.get(id);
    if (head === entry) {
      if (entry.next === undefined) this.#byId.delete(id);
      else this.#byId.set(id, entry.next);
      return;
    }
    for (let e = head; e !== undefined; e = e.next) {
      if (e.next === entry) {
        e.next = entry.next;
        return;
      }
    }
  }

  /** Resolves true once the channel's write buffer drained; false on close, timeout or wake. */
  waitForDrain(timeoutMs: number, run: Run): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    return new Promise<boolean>((resolve) => {
      const wake = (drained: boolean): void => {
        if (!this.#drainWaiters.delete(wake)) return;
        clearTimeout(timer);
        run.wake = undefined;
        resolve(drained);
      };
      const timer = setTimeout(() => wake(false), timeoutMs);
      this.#drainWaiters.add(wake);
      run.wake = wake;
    });
  }

  #wakeDrainWaiters(drained: boolean): void {
    for (const wake of [...this.#drainWaiters]) wake(drained);
  }

  /** Returns come before the confirm of the same message, in publish order. */
  #onReturn(message: Message): void {
    const id: unknown = message.properties.messageId;
    if (typeof id !== 'string') return;
    for (let e = this.#byId.get(id); e !== undefined; e = e.next) {
      if (e.returned === undefined) {
        e.returned = message.fields;
        return;
      }
    }
  }
}

/** One `publish()` call: its outcomes, settled one by one, resolved together. */
class Run {
  readonly outcomes: (PublishOutcome | undefined)[];
  readonly done: Promise<PublishOutcome[]>;
  /** Messages handed to the channel, in send order (so in deadline order). */
  readonly sent: Entry[] = [];
  /** Set while the run waits (for a slot or a drain); called with false to stop waiting. */
  wake: ((granted: boolean) => void) | undefined;
  aborted: PublishError | undefined;
  #abortedPromise: Promise<never> | undefined;
  #rejectAborted: ((error: Error) => void) | undefined;
  #unsettled: number;
  #resolve!: (outcomes: PublishOutcome[]) => void;
  #timer: NodeJS.Timeout | undefined;
  #swept = 0;

  constructor(size: number) {
    this.outcomes = new Array<PublishOutcome | undefined>(size);
    this.#unsettled = size;
    this.done = new Promise((resolve) => {
      this.#resolve = resolve;
    });
    if (size === 0) this.#resolve([]);
  }

  settle(index: number, outcome: PublishOutcome): void {
    if (this.outcomes[index] !== undefined) return;
    this.outcomes[index] = outcome;
    this.#unsettled -= 1;
    if (this.#unsettled === 0) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
      this.#resolve(this.outcomes as PublishOutcome[]);
    }
  }

  isSettled(index: number): boolean {
    return this.outcomes[index] !== undefined;
  }

  /** Rejects when the run is aborted (signal or forced close); for racing the set-up steps. */
  abortedPromise(): Promise<never> {
    if (this.#abortedPromise === undefined) {
      this.#abortedPromise = new Promise<never>((_, reject) => {
        this.#rejectAborted = reject;
      });
      this.#abortedPromise.catch(() => undefined);
      if (this.aborted !== undefined) this.#rejectAborted?.(this.aborted);
    }
    return this.#abortedPromise;
  }

  abort(error: PublishError, release: (entry: Entry) => void): void {
    if (this.aborted !== undefined) return;
    this.aborted = error;
    this.#rejectAborted?.(error);
    this.wake?.(false);
    for (const entry of this.sent) {
      release(entry);
      this.settle(entry.index, failed(error, true));
    }
  }

  /** One timer per run, armed for the oldest unconfirmed message's deadline. */
  arm(expire: (entry: Entry) => void): void {
    if (this.#timer !== undefined || this.#unsettled === 0) return;
    const next = this.#nextPending();
    if (next === undefined) return;
    this.#timer = setTimeout(
      () => {
        this.#timer = undefined;
        const now = Date.now();
        for (let e = this.#nextPending(); e !== undefined && e.deadline <= now; e = this.#nextPending()) {
          expire(e);
          this.#swept += 1;
        }
        this.arm(expire);
      },
      Math.max(0, next.deadline - Date.now()),
    );
  }

  #nextPending(): Entry | undefined {
    while (this.#swept < this.sent.length) {
      const entry = this.sent[this.#swept]!;
      if (!this.isSettled(entry.index)) return entry;
      this.#swept += 1;
    }
    return undefined;
  }
}

// --- the publisher --------------------------------------------------------------------------

class RabbitMqPublisher implements Publisher {
  readonly name = 'rabbitmq';
  readonly #options: RabbitMqPublisherOptions;
  readonly #timeoutMs: number;
  readonly #source: string;
  readonly #exchange: string | ((message: OutboxMessage) => string);
  readonly #routingKey: (message: OutboxMessage) => string;
  readonly #slots: Slots;
  /** `maxMessageBytes`, lowered to the broker's limit once it refused a message for its size. */
  #maxMessageBytes: number;
  readonly #runs = new Set<Run>();
  readonly #shutdown = new AbortController();
  #link: Link | undefined;
  #session: Session | undefined;
  #connecting: Promise<Session> | undefined;
  #closed = false;
  /** Set when close() starts tearing down: a connection arriving later is closed at once. */
  #terminated = false;
  #closing: Promise<void> | undefined;

  constructor(options: RabbitMqPublisherOptions) {
    this.#options = options;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#source = options.source ?? DEFAULT_SOURCE;
    this.#exchange = options.exchange ?? DEFAULT_EXCHANGE;
    this.#routingKey = options.routingKey ?? defaultRoutingKey;
    this.#slots = new Slots(options.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT);
    this.#maxMessageBytes = options.maxMessageBytes ?? Number.POSITIVE_INFINITY;
  }

  async publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (this.#closed) {
      throw publisherClosed('RabbitMQ');
    }
    const run = new Run(batch.length);
    const items: (Item | undefined)[] = batch.map((message, index) => {
      const prepared = this.#prepare(message);
      if ('ok' in prepared) {
        run.settle(index, prepared);
        return undefined;
      }
      return prepared;
    });
    if (items.every((item) => item === undefined)) return run.done;

    const release = (entry: Entry): void => this.#releaseSlot(entry);
    const onAbort = (): void =>
      run.abort(
        new PublishError(`Publish aborted before its confirm arrived: ${errorMessage(signal.reason)}`, {
          retryable: true,
          cause: signal.reason,
        }),
        release,
      );
    const onShutdown = (): void =>
      run.abort(
        new PublishError('The RabbitMQ publisher was closed before the confirm arrived', { retryable: true }),
        release,
      );
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    this.#shutdown.signal.addEventListener('abort', onShutdown, { once: true });
    this.#runs.add(run);
    try {
      await this.#send(run, items).catch((error: unknown) => {
        // A defect, not a verdict on the messages: they stay retryable.
        const outcome = failed(
          new PublishError(`RabbitMQ publish failed: ${errorMessage(error)}`, {
            retryable: true,
            cause: error,
          }),
          true,
        );
        for (let i = 0; i < items.length; i += 1) run.settle(i, outcome);
      });
      return await run.done;
    } finally {
      signal.removeEventListener('abort', onAbort);
      this.#shutdown.signal.removeEventListener('abort', onShutdown);
      this.#runs.delete(run);
    }
  }

  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  /** Exchange, routing key, content and properties; a message RabbitMQ cannot carry gets its outcome here. */
  #prepare(message: OutboxMessage): Item | PublishOutcome {
    const { eventId, payload } = message;
    let exchange: string;
    let routingKey: string;
    try {
      exchange = typeof this.#exchange === 'string' ? this.#exchange : this.#exchange(message);
      routingKey = this.#routingKey(message);
    } catch (error) {
      return permanent(
        `The exchange or routingKey function threw for event ${eventId}: ${errorMessage(error)}`,
        error,
      );
    }
    if (typeof exchange !== 'string' || typeof routingKey !== 'string') {
      return permanent(`The exchange and routingKey functions must return strings (event ${eventId})`);
    }
    if (Buffer.byteLength(exchange) > SHORTSTR_MAX || Buffer.byteLength(routingKey) > SHORTSTR_MAX) {
      return permanent(
        `Exchange "${exchange.slice(0, 64)}" or routing key "${routingKey.slice(0, 64)}" of event ${eventId} ` +
          `is longer than AMQP's ${SHORTSTR_MAX} bytes`,
      );
    }
    if (payload.byteLength > this.#maxMessageBytes) {
      return tooLarge(eventId, payload.byteLength, this.#maxMessageBytes);
    }
    const headers = envelopeHeaders(message, this.#source);
    // Encoded as an AMQP field table: name length, name, type tag, value length, value.
    let tableBytes = 0;
    for (const name in headers) tableBytes += 6 + Buffer.byteLength(name) + Buffer.byteLength(headers[name]!);
    if (tableBytes > PROPERTIES_BUFFER) {
      return permanent(
        `The headers of event ${eventId} take ${tableBytes} bytes encoded: more than the ` +
          `${PROPERTIES_BUFFER} bytes an AMQP header table can carry (amqplib)`,
      );
    }
    const propertiesBytes =
      tableBytes + 64 + eventId.length + message.type.length + message.contentType.length;
    return {
      eventId,
      exchange,
      routingKey,
      content: asBuffer(payload),
      options: {
        persistent: true,
        mandatory: true,
        messageId: eventId,
        contentType: message.contentType,
        type: message.type,
        timestamp: Math.floor(message.createdAt.getTime() / 1000),
        headers,
      },
      propertiesBytes,
    };
  }

  /** Connects, checks the exchanges, then writes every message, many confirms in flight. */
  async #send(run: Run, items: readonly (Item | undefined)[]): Promise<void> {
    const failRest = (from: number, outcome: PublishOutcome): void => {
      for (let i = from; i < items.length; i += 1) if (items[i] !== undefined) run.settle(i, outcome);
    };
    if (run.aborted !== undefined) return failRest(0, failed(run.aborted, true));

    let session: Session;
    try {
      session = await raceDeadline(this.#ensureSession(), this.#timeoutMs, run.abortedPromise());
    } catch (error) {
      return failRest(0, failed(this.#connectError(error, run), true));
    }
    if (session.link.blocked !== undefined)
      return failRest(0, failed(blockedError(session.link.blocked), true));

    const names = new Set<string>();
    for (const item of items) if (item !== undefined) names.add(item.exchange);
    let refused: Map<string, PublishError>;
    try {
      refused = await raceDeadline(
        this.#checkExchanges(session, names),
        this.#timeoutMs,
        run.abortedPromise(),
      );
    } catch (error) {
      return failRest(0, failed(this.#connectError(error, run), true));
    }

    const expire = (entry: Entry): void => this.#expire(session, entry);
    for (let i = 0; i < items.length; i += 1) {
      const item = items[i];
      if (item === undefined) continue;
      const refusal = refused.get(item.exchange);
      if (refusal !== undefined) {
        run.settle(i, failed(refusal, refusal.retryable));
        continue;
      }
      if (item.content.length > this.#maxMessageBytes) {
        run.settle(i, tooLarge(item.eventId, item.content.length, this.#maxMessageBytes));
        continue;
      }
      if (session.frameMax < PROPERTIES_BUFFER && item.propertiesBytes > session.frameMax - 8) {
        run.settle(
          i,
          permanent(
            `The headers of event ${item.eventId} take about ${item.propertiesBytes} bytes: more than ` +
              `the broker's frame_max of ${session.frameMax} bytes`,
          ),
        );
        continue;
      }
      if (run.aborted !== undefined) return failRest(i, failed(run.aborted, true));
      if (!this.#slots.tryAcquire() && !(await this.#waitForSlot(run))) {
        return failRest(i, failed(run.aborted ?? cancelledBeforeSend(item), true));
      }
      if (!session.writable && !session.closed && !(await session.waitForDrain(this.#timeoutMs, run))) {
        if (run.aborted !== undefined || !session.closed) {
          this.#slots.release();
          return failRest(i, failed(run.aborted ?? stalled(session, this.#timeoutMs), true));
        }
      }
      if (session.closed) {
        this.#slots.release();
        for (let j = i; j < items.length; j += 1) {
          const rest = items[j];
          if (rest !== undefined) run.settle(j, this.#lost(session, rest));
        }
        return;
      }
      this.#publishOne(session, run, i, item, expire);
    }
  }

  /** Resolves true with a slot held, or false when the run stopped waiting (`run.wake(false)`). */
  async #waitForSlot(run: Run): Promise<boolean> {
    const granted = await this.#slots.acquire((cancel) => {
      run.wake = cancel;
    });
    run.wake = undefined;
    return granted;
  }

  /** Hands one message to the channel (holding a slot); its confirm settles its outcome. */
  #publishOne(session: Session, run: Run, index: number, item: Item, expire: (entry: Entry) => void): void {
    const entry: Entry = {
      run,
      index,
      item,
      deadline: Date.now() + this.#timeoutMs,
      mark: session.activity.mark(),
      returned: undefined,
      slot: true,
      next: undefined,
    };
    session.track(entry);
    let accepted: boolean;
    try {
      accepted = session.channel.publish(item.exchange, item.routingKey, item.content, item.options, (err) =>
        this.#onConfirm(session, entry, err),
      );
    } catch (error) {
      session.untrack(entry);
      this.#releaseSlot(entry);
      if (error instanceof IllegalOperationError) {
        session.closed = true;
        run.settle(index, this.#lost(session, item));
      } else {
        run.settle(
          index,
          permanent(`RabbitMQ cannot carry event ${item.eventId}: ${errorMessage(error)}`, error),
        );
      }
      return;
    }
    if (!accepted) session.writable = false;
    run.sent.push(entry);
    run.arm(expire);
  }

  /** A confirm (ack or nack) arrived, or the channel closed before it did. */
  #onConfirm(session: Session, entry: Entry, err: unknown): void {
    if (!session.closed) session.activity.heard();
    session.untrack(entry);
    this.#releaseSlot(entry);
    const { run, index, item, returned } = entry;
    if (run.isSettled(index)) return; // timed out or aborted meanwhile
    if (returned !== undefined) {
      run.settle(index, unroutable(item, returned));
    } else if (err === null || err === undefined) {
      run.settle(index, DELIVERED);
    } else if (err instanceof Error && err.message === NACKED) {
      run.settle(
        index,
        failed(
          new PublishError(
            `RabbitMQ nacked event ${item.eventId} (exchange "${item.exchange}", routing key ` +
              `"${item.routingKey}"): the broker could not take it (queue full with reject-publish, or an internal error)`,
            { retryable: true, cause: err },
          ),
          true,
        ),
      );
    } else {
      session.closed = true;
      run.settle(index, this.#lost(session, item, err));
    }
  }

  /** No confirm within timeoutMs. */
  #expire(session: Session, entry: Entry): void {
    this.#releaseSlot(entry);
    const { item } = entry;
    // Nothing heard on the channel since the send: the link is in doubt (a stall, a half-open
    // connection), the broker's fault, not the event's.
    const why =
      session.link.blocked !== undefined
        ? ` (the broker blocks the connection: ${session.link.blocked})`
        : session.closed
          ? ' (the channel closed)'
          : session.activity.silentSince(entry.mark)
            ? ' (nothing heard from RabbitMQ since it was sent: the connection is in doubt)'
            : '';
    entry.run.settle(
      entry.index,
      failed(
        new PublishError(
          `Timed out after ${this.#timeoutMs} ms waiting for RabbitMQ to confirm event ${item.eventId}${why}`,
          why === '' ? { retryable: true } : { retryable: true, code: BROKER_UNAVAILABLE },
        ),
        true,
      ),
    );
  }

  #releaseSlot(entry: Entry): void {
    if (!entry.slot) return;
    entry.slot = false;
    this.#slots.release();
  }

  /**
   * The outcome of a message whose channel closed before its confirm: the broker's reason
   * decides (its size, its exchange), else the broker is unavailable.
   */
  #lost(session: Session, item: Item, cause?: unknown): PublishOutcome {
    const error = session.error;
    const code = error?.code;
    const reason = error?.message ?? session.link.error?.message;
    if (error !== undefined && code === 406) {
      const match = SIZE_REFUSAL.exec(error.message);
      if (match !== null) {
        const max = Number(match[2]);
        if (max < this.#maxMessageBytes) this.#maxMessageBytes = max;
        if (item.content.length > max) return tooLarge(item.eventId, item.content.length, max);
      }
    }
    if (error !== undefined && (code === 404 || code === 403)) {
      const match = (code === 404 ? NO_EXCHANGE : EXCHANGE_REFUSED).exec(error.message);
      if (match !== null) {
        session.exchanges.clear();
        if (match[1] === item.exchange) {
          return failed(exchangeRefused(item.exchange, error), true);
        }
      }
    }
    return failed(
      new PublishError(
        `The RabbitMQ channel closed before event ${item.eventId} was confirmed` +
          `${reason === undefined ? '' : `: ${reason}`} (the relay publishes it again, same message-id)`,
        { retryable: true, code: BROKER_UNAVAILABLE, cause: error ?? cause },
      ),
      true,
    );
  }

  #ensureSession(): Promise<Session> {
    const session = this.#session;
    if (session !== undefined && !session.closed) return Promise.resolve(session);
    this.#connecting ??= this.#openSession().finally(() => {
      this.#connecting = undefined;
    });
    return this.#connecting;
  }

  async #openSession(): Promise<Session> {
    let link = this.#link;
    if (link === undefined || link.closed) {
      link = await this.#openLink();
      this.#link = link;
    }
    const channel = await link.model.createConfirmChannel();
    const session = new Session(link, channel);
    if (this.#terminated) {
      await this.#teardown(session, link);
      throw publisherClosed('RabbitMQ');
    }
    this.#session = session;
    return session;
  }

  async #openLink(): Promise<Link> {
    const given = this.#options.connection;
    const model = given ?? (await this.#connect());
    const link: Link = {
      model,
      owned: given === undefined,
      closed: false,
      error: undefined,
      blocked: undefined,
      detach: () => undefined,
    };
    const onError = (error: Error): void => {
      link.error = error;
    };
    const onClose = (error?: Error): void => {
      link.closed = true;
      if (error !== undefined) link.error ??= error;
      link.blocked = undefined;
    };
    const onBlocked = (reason: string): void => {
      link.blocked = String(reason || 'resource alarm');
    };
    const onUnblocked = (): void => {
      link.blocked = undefined;
    };
    model.on('blocked', onBlocked);
    model.on('unblocked', onUnblocked);
    if (link.owned) {
      // Owned: we must listen for 'error' (an unheard 'error' event would crash the process).
      model.on('error', onError);
      model.on('close', onClose);
    }
    link.detach = () => {
      model.off('blocked', onBlocked);
      model.off('unblocked', onUnblocked);
      // An owned connection keeps its 'error' listener: a late error must not crash anything.
    };
    if (this.#terminated && link.owned) {
      await closeQuietly(model.close(), this.#timeoutMs);
      throw publisherClosed('RabbitMQ');
    }
    return link;
  }

  #connect(): Promise<ChannelModel> {
    const { url, socketOptions } = this.#options;
    const clientProperties = { connection_name: 'tx-outbox publisher', ...socketOptions?.clientProperties };
    return connect(url!, { timeout: this.#timeoutMs, ...socketOptions, clientProperties });
  }

  /**
   * Checks (or, with `assertExchange`, declares) each exchange not yet seen on this channel,
   * on a separate short-lived channel: a missing exchange closes the channel it is used on,
   * and this way it never takes the confirm channel (and its messages in flight) with it.
   */
  async #checkExchanges(session: Session, names: ReadonlySet<string>): Promise<Map<string, PublishError>> {
    const refused = new Map<string, PublishError>();
    let side: Channel | undefined;
    try {
      for (const name of names) {
        if (name === '' || session.exchanges.has(name)) continue;
        side ??= await openSideChannel(session.link.model);
        try {
          if (this.#options.assertExchange === true && !name.startsWith('amq.')) {
            await side.assertExchange(name, 'topic', { durable: true });
          } else {
            await side.checkExchange(name);
          }
          session.exchanges.add(name);
        } catch (error) {
          const code = (error as { code?: unknown }).code;
          if (code !== 404 && code !== 403 && code !== 406) throw error;
          refused.set(name, exchangeRefused(name, error as Error));
          side = undefined; // the broker closed it
        }
      }
    } finally {
      if (side !== undefined) void closeQuietly(side.close(), this.#timeoutMs);
    }
    return refused;
  }

  #connectError(error: unknown, run: Run): PublishError {
    if (run.aborted !== undefined) return run.aborted;
    const { url } = this.#options;
    return connectError('RabbitMQ', url === undefined ? 'the given connection' : describeUrl(url), error);
  }

  async #close(): Promise<void> {
    this.#closed = true;
    if (this.#runs.size > 0) {
      const runs = [...this.#runs].map((run) => run.done);
      const finished = await raceDeadline(Promise.all(runs), this.#timeoutMs).then(
        () => true,
        () => false,
      );
      if (!finished) {
        this.#shutdown.abort();
        await Promise.all(runs);
      }
    }
    this.#terminated = true;
    // A connect still under way closes what it opens on arrival (it sees #terminated).
    if (this.#connecting !== undefined) await closeQuietly(this.#connecting, this.#timeoutMs);
    const link = this.#link;
    if (link !== undefined) await this.#teardown(this.#session, link);
  }

  async #teardown(session: Session | undefined, link: Link): Promise<void> {
    if (session !== undefined && !session.closed)
      await closeQuietly(session.channel.close(), this.#timeoutMs);
    link.detach();
    if (link.owned && !link.closed) {
      const closed = await closeQuietly(link.model.close(), this.#timeoutMs);
      // A connection whose close handshake never completes (broker gone silent): drop the socket.
      if (!closed)
        (link.model as { connection?: { stream?: { destroy?(): void } } }).connection?.stream?.destroy?.();
    }
  }
}

// --- helpers --------------------------------------------------------------------------------

async function openSideChannel(model: AmqpConnection): Promise<Channel> {
  const channel = await model.createChannel();
  channel.on('error', () => undefined); // refusals arrive as the rejected operation's error
  return channel;
}

function tooLarge(eventId: string, bytes: number, max: number): PublishOutcome {
  return permanent(
    `Event ${eventId} is ${bytes} bytes: larger than the ${max} bytes RabbitMQ accepts ` +
      '(max_message_size / maxMessageBytes)',
  );
}

function unroutable(item: Item, fields: Message['fields']): PublishOutcome {
  const code = (fields as { replyCode?: unknown }).replyCode;
  const text = (fields as { replyText?: unknown }).replyText;
  return permanent(
    `RabbitMQ returned event ${item.eventId} as unroutable (${String(code)} ${String(text)}): no queue is ` +
      `bound to exchange "${item.exchange}" for routing key "${item.routingKey}". Bind a queue for this ` +
      'routing key (or give the exchange an alternate exchange), then replay the event',
  );
}

function exchangeRefused(exchange: string, cause: Error & { code?: unknown }): PublishError {
  const what =
    cause.code === 404
      ? `exchange "${exchange}" does not exist (declare it, or set assertExchange: true)`
      : cause.code === 403
        ? `access to exchange "${exchange}" was refused (check the user's permissions)`
        : `exchange "${exchange}" exists with other settings than a durable topic exchange`;
  return new PublishError(`RabbitMQ refused to publish: ${what}: ${cause.message}`, {
    retryable: true,
    cause,
  });
}

function blockedError(reason: string): PublishError {
  return new PublishError(`RabbitMQ blocks publishing on this connection (${reason})`, {
    retryable: true,
    code: BROKER_UNAVAILABLE,
  });
}

function stalled(session: Session, timeoutMs: number): PublishError {
  const blocked = session.link.blocked;
  return new PublishError(
    `RabbitMQ did not read from the connection for ${timeoutMs} ms` +
      (blocked === undefined ? '' : ` (it blocks publishing: ${blocked})`),
    { retryable: true, code: BROKER_UNAVAILABLE },
  );
}

function cancelledBeforeSend(item: Item): PublishError {
  return new PublishError(`Publish of event ${item.eventId} was cancelled before sending`, {
    retryable: true,
  });
}

/** The URL for an error message, without its password. */
function describeUrl(url: string | Options.Connect): string {
  if (typeof url !== 'string') {
    return `${url.protocol ?? 'amqp'}://${url.hostname ?? 'localhost'}:${url.port ?? 5672}${url.vhost ? `/${url.vhost}` : ''}`;
  }
  return redactUrl(url);
}

/** Resolves true when `closing` settled in time (resolved or rejected), false after `timeoutMs`. */
function closeQuietly(closing: Promise<unknown>, timeoutMs: number): Promise<boolean> {
  return raceDeadline(closing, timeoutMs).then(
    () => true,
    (error: unknown) => !(error instanceof Error && error.name === 'TimeoutError'),
  );
}
