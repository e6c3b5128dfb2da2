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
import { connect, type NatsConnection, nanos } from '@nats-io/transport-node';
import type { PoolClient } from 'pg';
import { isEnvelopeName, repeatedHeader } from '../envelope/read.js';
import { errorMessage } from '../errors.js';
import { fromEnvelope, type InboxMessage } from '../inbox/message.js';
import { apiErrorCode } from '../publishers/nats/classify.js';
import { noteDelivery } from '../tracing/process-span.js';
import { aggregateKey, type Consumer } from './consumer.js';
import { deferDelay } from './defer.js';
import { KeyedQueue } from './keyed-queue.js';
import { ConsumerLifecycle } from './lifecycle.js';
import {
  type NatsConsumerOptions,
  type ResolvedNatsConsumerOptions,
  resolveNatsConsumerOptions,
} from './nats-options.js';

export type { Consumer } from './consumer.js';
export type { NatsConsumerOptions } from './nats-options.js';

const CONSUMER_NOT_FOUND = 10014;

/**
 * Consumes a JetStream stream through the inbox.
 *
 * @example
 * const consumer = await consumeNats({ inbox, handler, url: 'nats://127.0.0.1:4222', stream: 'ORDERS', durable: 'inventory' });
 * // …
 * await consumer.stop();
 */
export async function consumeNats<T = unknown, Tx = PoolClient>(
  options: NatsConsumerOptions<T, Tx>,
): Promise<Consumer> {
  const o = resolveNatsConsumerOptions(options);
  const owned = o.client === undefined;
  const nc = o.client ?? (await connect({ ...o.clientOptions, servers: o.url! }));
  try {
    await ensureConsumer(nc, o);
    const consumer = await jetstream(nc).consumers.get(o.stream, o.durable);
    const messages = await consumer.consume({ max_messages: o.concurrency * 2 });
    const adapter = new NatsConsumer(nc, owned, messages, o);
    adapter.start();
    return adapter;
  } catch (error) {
    if (owned) await nc.close().catch(() => undefined);
    throw error;
  }
}

async function ensureConsumer<T, Tx>(
  nc: NatsConnection,
  o: ResolvedNatsConsumerOptions<T, Tx>,
): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const update = {
    ack_wait: nanos(o.ackWaitMs),
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

/**
 * A delivery's headers by their names exactly as sent, for `fromEnvelope`: it reads the `ce-*`
 * headers of the NATS binding (percent-encoded) and those tx-outbox 0.1 wrote (values as they
 * are). A header that can carry an envelope attribute and comes twice is refused; any other
 * repeated header keeps its first value.
 */
function headerRecord(msg: JsMsg): Record<string, string> {
  const headers: Record<string, string> = {};
  if (msg.headers === undefined) return headers;
  for (const [name, values] of msg.headers) {
    if (values.length > 1 && isEnvelopeName(name)) throw repeatedHeader(name, 'message');
    headers[name] = values[0] ?? '';
  }
  return headers;
}

class NatsConsumer<T, Tx> implements Consumer {
  readonly #queue: KeyedQueue;
  readonly #life: ConsumerLifecycle;
  #loop: Promise<void> | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly owned: boolean,
    private readonly messages: ConsumerMessages,
    private readonly o: ResolvedNatsConsumerOptions<T, Tx>,
  ) {
    this.#queue = new KeyedQueue(o.concurrency);
    this.#life = new ConsumerLifecycle(o.signal, () => this.#shutdown());
  }

  start(): void {
    this.#loop = this.#run();
    this.#life.started();
  }

  stop(): Promise<void> {
    return this.#life.stop();
  }

  async #shutdown(): Promise<void> {
    await this.messages.close().catch(() => undefined);
    await this.#loop;
    await this.#life.settled();
    if (this.owned) await this.nc.drain().catch(() => undefined);
    else await this.nc.flush().catch(() => undefined);
  }

  async #run(): Promise<void> {
    try {
      for await (const msg of this.messages) {
        if (this.#life.stopping) {
          msg.nak();
          continue;
        }
        this.#life.track(this.#deliver(msg));
        // Backpressure: never more than twice the concurrency handled or waiting.
        while (this.#life.inFlight >= this.o.concurrency * 2) await this.#life.oneSettled();
      }
    } catch (error) {
      if (!this.#life.stopping)
        this.o.logger.error({ err: error, stream: this.o.stream }, 'NATS consumer stopped');
    }
  }

  async #deliver(msg: JsMsg): Promise<void> {
    let message: InboxMessage;
    try {
      message = noteDelivery(fromEnvelope(headerRecord(msg), msg.data), {
        system: 'nats',
        destination: msg.subject,
      });
    } catch (error) {
      const reason = `no tx-outbox envelope: ${errorMessage(error)}`;
      this.o.logger.error(
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
      if (result.status === 'deferred') msg.nak(deferDelay(this.o.defer, result.attempts));
      else msg.ack();
    } catch (error) {
      // The inbox itself failed (database down …): nothing was committed, redeliver later.
      this.o.logger.error({ err: error, eventId: message.eventId }, 'inbox failed; redelivering later');
      msg.nak(this.o.defer.deferMs);
    }
  }
}
