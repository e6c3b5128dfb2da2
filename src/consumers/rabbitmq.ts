/**
 * RabbitMQ consumer adapter (AMQP 0-9-1 through amqplib): consumes a queue with manual
 * acknowledgement and a prefetch window; each delivery is read from its CloudEvents envelope
 * (the AMQP binding's `cloudEvents_*` headers and `content-type` property, as
 * `rabbitmqPublisher` sends them; `cloudEvents:*` headers; the `ce-*` headers of tx-outbox 0.1),
 * handled through a KeyedQueue keyed by aggregate (bounded concurrency, never two deliveries of
 * one aggregate at once), and acknowledged only after `inbox.handle` resolved — after the inbox
 * transaction committed. `deferred` (or an inbox failure) is held for `deferMs`, then a copy
 * (every property and header as delivered, so the envelope in whichever form) is published to
 * the tail of the queue (default exchange, confirmed) and the delivery acked — a
 * `nack(requeue)` would put it back at the head, where prefetch-many deferred messages would
 * keep every message behind them waiting; only when that publish fails is it nacked with
 * requeue. Every other status is acked. A message without a tx-outbox envelope is rejected
 * without requeue (dead-lettered when the queue has a dead-letter exchange, dropped otherwise)
 * and logged.
 */

import { type Channel, type ConfirmChannel, type ConsumeMessage, connect } from 'amqplib';
import type { PoolClient } from 'pg';
import { errorMessage } from '../errors.js';
import { fromEnvelope, type InboxMessage } from '../inbox/message.js';
import type { AmqpConnection } from '../publishers/rabbitmq/index.js';
import { noteDelivery } from '../tracing/process-span.js';
import { aggregateKey, type Consumer } from './consumer.js';
import { KeyedQueue } from './keyed-queue.js';
import { ConsumerLifecycle } from './lifecycle.js';
import {
  type RabbitMqConsumerOptions,
  type ResolvedRabbitMqConsumerOptions,
  resolveRabbitMqConsumerOptions,
} from './rabbitmq-options.js';

export type { Consumer } from './consumer.js';
export type { RabbitMqConsumerOptions } from './rabbitmq-options.js';

/**
 * Consumes a RabbitMQ queue through the inbox.
 *
 * @example
 * const consumer = await consumeRabbitMq({ inbox, handler, url: 'amqp://guest:guest@127.0.0.1:5672', queue: 'inventory' });
 * // …
 * await consumer.stop();
 */
export async function consumeRabbitMq<T = unknown, Tx = PoolClient>(
  options: RabbitMqConsumerOptions<T, Tx>,
): Promise<Consumer> {
  const o = resolveRabbitMqConsumerOptions(options);
  const owned = o.client === undefined;
  const connection: AmqpConnection = o.client ?? (await connect(o.url!, o.clientOptions));
  let channel: Channel | undefined;
  try {
    channel = await connection.createChannel();
    await channel.checkQueue(o.queue);
    await channel.prefetch(o.prefetch);
    const adapter = new RabbitMqConsumer(connection, owned, channel, o);
    await adapter.start();
    return adapter;
  } catch (error) {
    if (channel) await channel.close().catch(() => undefined);
    if (owned) await connection.close().catch(() => undefined);
    throw error;
  }
}

/**
 * What `fromEnvelope` reads from a delivery: the header table as strings, plus the AMQP
 * `content-type` property, which carries `datacontenttype` in the AMQP binding (§3.1.1). The
 * attributes are `cloudEvents_*` headers (`rabbitmqPublisher`), `cloudEvents:*` (other
 * CloudEvents producers, the binding's older separator) or `ce-*` (tx-outbox 0.1, which also
 * sent `ce-datacontenttype`).
 */
function deliveryHeaders(msg: ConsumeMessage): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(msg.properties.headers ?? {})) {
    const text = headerText(value);
    if (text !== undefined) headers[name] = text;
  }
  const { contentType, messageId } = msg.properties as { contentType?: unknown; messageId?: unknown };
  if (typeof contentType === 'string') headers['content-type'] = contentType;
  if (typeof messageId === 'string') addMissingId(headers, messageId);
  return headers;
}

/**
 * A header value as a string. amqplib gives long strings as strings, byte arrays as Buffers,
 * numbers and booleans as such, and timestamps as `{ '!': 'timestamp', value: <seconds> }`:
 * what an AMQP 1.0 producer's native Integer, Boolean and Timestamp attributes become on the way
 * to AMQP 0-9-1 (the binding lets producers use them instead of canonical strings, §3.1.3.2).
 */
function headerText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean')
    return String(value);
  if (typeof value === 'object' && value !== null && (value as { '!'?: unknown })['!'] === 'timestamp') {
    const seconds = (value as { value?: unknown }).value;
    if (typeof seconds === 'number' && Number.isFinite(seconds))
      return new Date(seconds * 1000).toISOString();
  }
  return undefined;
}

/** Envelope prefixes a RabbitMQ delivery may carry, the AMQP binding's first. */
const ID_PREFIXES = ['cloudevents_', 'cloudevents:', 'ce-'] as const;

/**
 * The AMQP message-id is the event id (the publisher sets both): it stands in for an id header
 * stripped on the way, named with the prefix the envelope's other headers carry, so that the
 * reader sees one envelope. A delivery without an envelope gets nothing.
 */
function addMissingId(headers: Record<string, string>, messageId: string): void {
  let found: string | undefined;
  for (const name in headers) {
    const lower = name.toLowerCase();
    const prefix = ID_PREFIXES.find((p) => lower.startsWith(p));
    if (prefix === undefined) continue;
    if (lower === `${prefix}id`) return;
    // An AMQP binding header wins over a `ce-` one: that is the form the reader picks.
    if (found === undefined || (found.toLowerCase() === 'ce-' && prefix !== 'ce-'))
      found = name.slice(0, prefix.length);
  }
  if (found !== undefined) headers[`${found}id`] = messageId;
}

class RabbitMqConsumer<T, Tx> implements Consumer {
  readonly #queue: KeyedQueue;
  readonly #life: ConsumerLifecycle;
  /** Deferred deliveries waiting for their requeue. */
  readonly #timers = new Map<NodeJS.Timeout, ConsumeMessage>();
  #tag: string | undefined;
  #closed = false;
  /** Publishes deferred copies to the tail of the queue; opened at the first deferral. */
  #republisher: Promise<Republisher> | undefined;

  constructor(
    private readonly connection: AmqpConnection,
    private readonly owned: boolean,
    private readonly channel: Channel,
    private readonly o: ResolvedRabbitMqConsumerOptions<T, Tx>,
  ) {
    this.#queue = new KeyedQueue(o.concurrency);
    this.#life = new ConsumerLifecycle(o.signal, () => this.#shutdown());
  }

  async start(): Promise<void> {
    this.channel.on('error', (error: unknown) => {
      this.o.logger.error({ err: error, queue: this.o.queue }, 'RabbitMQ consumer channel error');
    });
    this.channel.on('close', () => {
      this.#closed = true;
    });
    const { consumerTag } = await this.channel.consume(this.o.queue, (msg) => this.#onMessage(msg), {
      noAck: false,
    });
    this.#tag = consumerTag;
    this.#life.started();
  }

  stop(): Promise<void> {
    return this.#life.stop();
  }

  async #shutdown(): Promise<void> {
    if (this.#tag !== undefined && !this.#closed) await this.channel.cancel(this.#tag).catch(() => undefined);
    await this.#life.settled();
    // Deferred deliveries go back to the queue now rather than after their delay.
    for (const [timer, msg] of this.#timers) {
      clearTimeout(timer);
      this.#settle(() => this.channel.nack(msg, false, true));
    }
    this.#timers.clear();
    await this.#life.settled();
    if (this.#republisher) await this.#dropRepublisher(this.#republisher);
    if (!this.#closed) await this.channel.close().catch(() => undefined);
    if (this.owned) await this.connection.close().catch(() => undefined);
  }

  #onMessage(msg: ConsumeMessage | null): void {
    if (msg === null) {
      // The broker cancelled the consumer (queue deleted …).
      if (!this.#life.stopping)
        this.o.logger.error({ queue: this.o.queue }, 'RabbitMQ consumer cancelled by the broker');
      return;
    }
    if (this.#life.stopping) {
      this.#settle(() => this.channel.nack(msg, false, true));
      return;
    }
    this.#life.track(this.#deliver(msg));
  }

  /** Acks/nacks; a closed channel makes the broker requeue anyway, so errors are only logged. */
  #settle(action: () => void): void {
    if (this.#closed) return;
    try {
      action();
    } catch (error) {
      this.o.logger.warn({ err: error, queue: this.o.queue }, 'RabbitMQ ack/nack failed');
    }
  }

  #requeueLater(msg: ConsumeMessage): void {
    if (this.#life.stopping || this.o.deferMs === 0) {
      this.#settle(() => this.channel.nack(msg, false, true));
      return;
    }
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      this.#life.track(this.#toTail(msg));
    }, this.o.deferMs);
    this.#timers.set(timer, msg);
  }

  /** A confirmed copy at the tail of the queue, then the ack; nack(requeue) if the copy failed. */
  async #toTail(msg: ConsumeMessage): Promise<void> {
    // The consumer channel closed meanwhile: the broker has requeued the delivery already.
    if (this.#closed) return;
    const pending = this.#currentRepublisher();
    try {
      const { channel } = await pending;
      const { userId: _userId, headers = {}, ...properties } = msg.properties;
      // CC/BCC would route the copy to more queues.
      const { CC: _cc, BCC: _bcc, ...kept } = headers as Record<string, unknown>;
      const previous = Number(String(kept['x-txo-deferrals'] ?? 0));
      const deferrals = (Number.isFinite(previous) ? previous : 0) + 1;
      await withTimeout(
        new Promise<void>((resolve, reject) => {
          channel.sendToQueue(
            this.o.queue,
            msg.content,
            { ...dropUndefined(properties), headers: { ...kept, 'x-txo-deferrals': deferrals } },
            (error: unknown) => (error ? reject(error) : resolve()),
          );
        }),
        CONFIRM_TIMEOUT_MS,
        'the broker did not confirm the deferred copy',
      );
      this.#settle(() => this.channel.ack(msg));
    } catch (error) {
      // Not published, or not known to be: the delivery goes back (a late copy is a duplicate,
      // which the inbox answers as such).
      this.o.logger.warn(
        { err: error, queue: this.o.queue },
        'deferred copy not published; requeued instead',
      );
      await this.#dropRepublisher(pending);
      this.#settle(() => this.channel.nack(msg, false, true));
    }
  }

  /** The republisher, opened at the first deferral (and again after it was dropped). */
  #currentRepublisher(): Promise<Republisher> {
    if (this.#republisher) return this.#republisher;
    const pending = this.#openRepublisher();
    this.#republisher = pending;
    // Closed under us (broker error, connection lost): the next deferral opens another.
    pending.then(
      ({ channel }) => channel.on('close', () => void this.#dropRepublisher(pending)),
      () => undefined,
    );
    return pending;
  }

  /**
   * A confirm channel for the deferred copies, on a connection of its own when the adapter owns
   * its connection: under a memory or disk alarm RabbitMQ blocks publishing connections, and the
   * consumer's acks must still get through.
   */
  async #openRepublisher(): Promise<Republisher> {
    const connection = this.owned ? await connect(this.o.url!, this.o.clientOptions) : undefined;
    try {
      const channel = await (connection ?? this.connection).createConfirmChannel();
      channel.on('error', (error: unknown) => {
        this.o.logger.warn({ err: error, queue: this.o.queue }, 'RabbitMQ deferral channel error');
      });
      return { channel, connection };
    } catch (error) {
      await connection?.close().catch(() => undefined);
      throw error;
    }
  }

  /** Forgets the republisher (if it is still the current one) and closes what it opened. */
  async #dropRepublisher(pending: Promise<Republisher>): Promise<void> {
    if (this.#republisher === pending) this.#republisher = undefined;
    const republisher = await pending.catch(() => undefined);
    if (!republisher) return;
    await republisher.channel.close().catch(() => undefined);
    await republisher.connection?.close().catch(() => undefined);
  }

  async #deliver(msg: ConsumeMessage): Promise<void> {
    let message: InboxMessage;
    try {
      message = noteDelivery(fromEnvelope(deliveryHeaders(msg), msg.content), {
        system: 'rabbitmq',
        destination: this.o.queue,
      });
    } catch (error) {
      const reason = `no tx-outbox envelope: ${errorMessage(error)}`;
      this.o.logger.error(
        {
          queue: this.o.queue,
          messageId: msg.properties.messageId,
          routingKey: msg.fields.routingKey,
          reason,
        },
        'message rejected (dead-lettered if the queue has a dead-letter exchange)',
      );
      this.#settle(() => this.channel.nack(msg, false, false));
      return;
    }
    try {
      const result = await this.#queue.run(aggregateKey(message), () =>
        this.o.inbox.handle(message, this.o.handler),
      );
      if (result.status === 'deferred') this.#requeueLater(msg);
      else this.#settle(() => this.channel.ack(msg));
    } catch (error) {
      // The inbox itself failed (database down …): nothing was committed, redeliver later.
      this.o.logger.error({ err: error, eventId: message.eventId }, 'inbox failed; redelivering later');
      this.#requeueLater(msg);
    }
  }
}

/** Where deferred copies are published: a confirm channel, on its own connection when owned. */
interface Republisher {
  readonly channel: ConfirmChannel;
  readonly connection: AmqpConnection | undefined;
}

const CONFIRM_TIMEOUT_MS = 10_000;

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function dropUndefined<O extends object>(o: O): Partial<O> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined && v !== null)) as Partial<O>;
}
