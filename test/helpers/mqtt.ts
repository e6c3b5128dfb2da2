import { randomUUID } from 'node:crypto';
import { connectAsync, type IPublishPacket, type MqttClient } from 'mqtt';

/** The shared Mosquitto the MQTT tests run against. */
export const MQTT_BROKER = { host: '127.0.0.1', port: 1883 } as const;
export const MQTT_BROKER_URL = `mqtt://${MQTT_BROKER.host}:${MQTT_BROKER.port}`;

export interface TappedMessage {
  readonly topic: string;
  readonly payload: Buffer;
  readonly packet: IPublishPacket;
}

/**
 * An MQTT 5 subscriber keeping everything published under `${prefix}/<ns>/…`, per namespace
 * (the topic level after the prefix). The prefix is unique per instance: test files run in
 * parallel against one shared Mosquitto.
 */
export class MqttTap {
  readonly prefix = `txo-mqtt-${randomUUID().slice(0, 8)}`;
  readonly received = new Map<string, TappedMessage[]>();
  readonly #url: string;
  readonly #subscribed = new Set<string>();
  #subscriber: MqttClient | undefined;

  constructor(url: string) {
    this.#url = url;
  }

  /** Connects the subscriber (clean session, reconnecting every 200 ms) and returns it. */
  async start(): Promise<MqttClient> {
    const subscriber = await connectAsync(this.#url, {
      protocolVersion: 5,
      clean: true,
      reconnectPeriod: 200,
    });
    subscriber.on('message', (topic, payload, packet) => {
      const ns = topic.split('/')[1] ?? '';
      const list = this.received.get(ns) ?? [];
      this.received.set(ns, list);
      list.push({ topic, payload, packet });
    });
    this.#subscriber = subscriber;
    return subscriber;
  }

  /** Subscribes (QoS 1, SUBACK awaited) to everything under `${prefix}/${ns}/` before anything is published there. */
  async listen(ns: string): Promise<void> {
    if (this.#subscribed.has(ns)) return;
    this.#subscribed.add(ns);
    this.received.set(ns, this.received.get(ns) ?? []);
    await this.#subscriber!.subscribeAsync(`${this.prefix}/${ns}/#`, { qos: 1 });
  }

  /** What the subscriber got for `ns`, once `expected` messages arrived (or 10 s passed), plus a short grace for extras. */
  async arrived(ns: string, expected: number, graceMs = 100): Promise<TappedMessage[]> {
    const deadline = Date.now() + 10_000;
    while ((this.received.get(ns)?.length ?? 0) < expected && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    await new Promise((r) => setTimeout(r, graceMs));
    return [...(this.received.get(ns) ?? [])];
  }

  async unlisten(ns: string): Promise<void> {
    await this.#subscriber!.unsubscribeAsync(`${this.prefix}/${ns}/#`);
  }

  async close(): Promise<void> {
    await this.#subscriber?.endAsync();
  }
}

/** A PUBLISH's user properties, first value of each. */
export function userProperties(packet: IPublishPacket): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(packet.properties?.userProperties ?? {})) {
    headers[name] = Array.isArray(value) ? (value[0] ?? '') : value;
  }
  return headers;
}
