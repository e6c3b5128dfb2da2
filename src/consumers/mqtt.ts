/**
 * MQTT 5 consumer adapter on MQTT.js 5.x: a persistent session (`clean: false`, fixed
 * `clientId`, `sessionExpiryInterval`) subscribed at QoS 1, whose messages go through the
 * inbox. The CloudEvents envelope is read as the MQTT binding says: binary mode from the user
 * properties and the PUBLISH Content Type (what `mqttPublisher` sends over MQTT 5; the `ce-*`
 * user properties of tx-outbox 0.1 too), structured mode from the JSON event in the payload
 * (Content Type `application/cloudevents+json`, or a PUBLISH without properties: what
 * `mqttPublisher` sends over MQTT 3.1.1). Each delivery is handled through a KeyedQueue keyed
 * by aggregate (bounded concurrency, one delivery of an aggregate at a time), and its PUBACK is
 * written only after `inbox.handle` resolved — after the inbox transaction committed.
 *
 * Manual acks: MQTT.js's `customHandleAcks` hook is installed, and the PUBACK it produces is
 * held back until the delivery was handled. (MQTT.js handles incoming packets one at a time and
 * waits for the PUBACK write before reading the next one; holding the PUBACK inside the hook
 * would serialize the whole connection and keep a deferred message from ever seeing the one it
 * waits for. So the packet pump is released at once and only the PUBACK write waits.)
 *
 * MQTT has no negative ack: a `deferred` delivery is not acked, and handled again in-process
 * after `deferMs` (doubling up to `deferCapMs`), until the inbox answers something else (its
 * `maxGapMs` bounds this: past it, it quarantines) — then it is acked. The same goes for an inbox failure
 * (database down). When the connection drops, unacked deliveries are redelivered by the broker
 * on the resumed session (the inbox deduplicates them). A message without a tx-outbox envelope
 * cannot be deduplicated nor quarantined: it is acked (dropped) and logged.
 */

import { connect, type IPublishPacket, type MqttClient } from 'mqtt';
import type { PoolClient } from 'pg';
import { isEnvelopeName, repeatedHeader } from '../envelope/read.js';
import { errorMessage } from '../errors.js';
import { fromEnvelope, type InboxMessage } from '../inbox/message.js';
import { sleep } from '../sleep.js';
import { noteDelivery } from '../tracing/process-span.js';
import { handleAttempt } from './attempt.js';
import type { Consumer } from './consumer.js';
import { KeyedQueue } from './keyed-queue.js';
import { ConsumerLifecycle } from './lifecycle.js';
import {
  type MqttConsumerOptions,
  type ResolvedMqttConsumerOptions,
  resolveMqttConsumerOptions,
} from './mqtt-options.js';
import { isStructured, readStructured } from './mqtt-structured.js';

export type { Consumer } from './consumer.js';
export type { MqttConsumerOptions } from './mqtt-options.js';

type SendPacket = (packet: { cmd: string; messageId?: number }, cb?: (error?: Error) => void) => void;

/**
 * Consumes an MQTT topic filter through the inbox.
 *
 * @example
 * const consumer = await consumeMqtt({ inbox, handler, url: 'mqtt://127.0.0.1:1883', topic: 'order/#', clientId: 'inventory' });
 * // …
 * await consumer.stop();
 */
export async function consumeMqtt<T = unknown, Tx = PoolClient>(
  options: MqttConsumerOptions<T, Tx>,
): Promise<Consumer> {
  const o = resolveMqttConsumerOptions(options);
  const owned = o.client === undefined;
  const client =
    o.client ??
    connect(o.url!, {
      reconnectPeriod: 1000,
      ...o.clientOptions,
      protocolVersion: 5,
      clean: false,
      clientId: o.clientId,
      properties: { ...o.clientOptions?.properties, sessionExpiryInterval: o.sessionExpirySeconds },
    });
  const adapter = new MqttConsumer(client, owned, o);
  try {
    await adapter.start();
    return adapter;
  } catch (error) {
    await adapter.stop().catch(() => undefined);
    throw error;
  }
}

class MqttConsumer<T, Tx> implements Consumer {
  readonly #queue: KeyedQueue;
  readonly #life: ConsumerLifecycle;
  /** Deliveries being handled, by packet id: their PUBACK waits for them. */
  readonly #handling = new Map<number, Promise<boolean>>();
  /** Bumped on every (re)connection: a PUBACK of an older connection is never sent. */
  #generation = 0;
  #originalSend: SendPacket | undefined;
  readonly #onConnect = (): void => {
    this.#generation += 1;
  };
  readonly #onError = (error: Error): void => {
    this.o.logger.warn({ err: error, topic: this.o.topic }, 'MQTT consumer connection error');
  };

  constructor(
    private readonly client: MqttClient,
    private readonly owned: boolean,
    private readonly o: ResolvedMqttConsumerOptions<T, Tx>,
  ) {
    this.#queue = new KeyedQueue(o.concurrency);
    this.#life = new ConsumerLifecycle(o.signal, () => this.#shutdown());
  }

  async start(): Promise<void> {
    const client = this.client;
    client.options.customHandleAcks = (_topic, message, packet, done) => {
      this.#receive(packet as IPublishPacket, message);
      done(0);
    };
    // Hold back the PUBACK of a delivery still being handled; release the packet pump at once.
    const raw = client as unknown as { _sendPacket: SendPacket };
    const send = raw._sendPacket.bind(client);
    this.#originalSend = raw._sendPacket;
    raw._sendPacket = (packet, cb) => {
      const handling = packet.cmd === 'puback' ? this.#handling.get(packet.messageId!) : undefined;
      if (handling === undefined) return send(packet, cb);
      this.#handling.delete(packet.messageId!);
      const generation = this.#generation;
      void handling.then((ack) => {
        if (ack && generation === this.#generation && client.connected) send(packet);
      });
      cb?.();
    };
    client.on('connect', this.#onConnect);
    client.on('error', this.#onError);
    if (!client.connected) {
      await new Promise<void>((resolve, reject) => {
        const ok = (): void => {
          client.off('error', fail);
          resolve();
        };
        const fail = (error: Error): void => {
          client.off('connect', ok);
          reject(error);
        };
        client.once('connect', ok);
        client.once('error', fail);
      });
    }
    const granted = await client.subscribeAsync(this.o.topic, { qos: 1 });
    const code = granted[0]?.qos;
    if (code === undefined || code > 2)
      throw new Error(`The broker refused the subscription to ${this.o.topic} (reason ${String(code)})`);
    this.#life.started();
  }

  stop(): Promise<void> {
    return this.#life.stop();
  }

  async #shutdown(): Promise<void> {
    await this.#life.settled();
    const client = this.client;
    client.off('connect', this.#onConnect);
    client.off('error', this.#onError);
    if (this.owned) {
      // Deliveries that arrive from now on are never acked: the session keeps them.
      await new Promise<void>((resolve) => client.end(false, () => resolve()));
    } else {
      if (this.#originalSend)
        (client as unknown as { _sendPacket: SendPacket })._sendPacket = this.#originalSend;
      client.options.customHandleAcks = undefined;
    }
  }

  #receive(packet: IPublishPacket, payload: Buffer): void {
    if (this.#life.stopping) {
      // Left unacked: redelivered to the next session.
      if (packet.messageId !== undefined) this.#handling.set(packet.messageId, Promise.resolve(false));
      return;
    }
    const task = this.#deliver(packet, payload);
    if (packet.messageId !== undefined) this.#handling.set(packet.messageId, task);
    this.#life.track(task.then(() => undefined));
  }

  /** Handles a delivery; resolves true when it may be acked. */
  async #deliver(packet: IPublishPacket, payload: Buffer): Promise<boolean> {
    let message: InboxMessage;
    try {
      const { headers, payload: data } = envelopeOf(packet, payload);
      message = noteDelivery(fromEnvelope(headers, data), { system: 'mqtt', destination: packet.topic });
    } catch (error) {
      const reason = `no tx-outbox envelope: ${errorMessage(error)}`;
      this.o.logger.error({ topic: packet.topic, reason }, 'message dropped');
      return true;
    }
    for (;;) {
      // Deferred, or the inbox failed (nothing was committed): handle it again later.
      const delay = await handleAttempt(this.#queue, this.o, message, 'inbox failed; retrying later');
      if (delay === undefined) return true;
      if (this.#life.stopping) return false;
      await sleep(delay, this.#life.halt);
      if (this.#life.stopping) return false;
    }
  }
}

/**
 * What `fromEnvelope` reads of a PUBLISH. Binary mode (§3.1): the user properties (a repeated
 * one that can carry an envelope attribute is refused, any other keeps its first value) and
 * the Content Type as `content-type` (the binding's
 * `datacontenttype`, §3.1.1), the payload as it is. Structured mode (§3.2): the JSON event's
 * members and its data.
 */
function envelopeOf(
  packet: Pick<IPublishPacket, 'properties'>,
  payload: Buffer,
): { headers: Record<string, string>; payload: Uint8Array } {
  const properties = packet.properties;
  const userProperties = Object.entries(properties?.userProperties ?? {});
  if (isStructured(properties?.contentType, userProperties.length > 0)) return readStructured(payload);
  const headers: Record<string, string> = {};
  for (const [name, value] of userProperties) {
    if (Array.isArray(value) && value.length > 1 && isEnvelopeName(name))
      throw repeatedHeader(name, 'message');
    headers[name] = Array.isArray(value) ? (value[0] ?? '') : value;
  }
  if (properties?.contentType !== undefined) headers['content-type'] = properties.contentType;
  return { headers, payload };
}
