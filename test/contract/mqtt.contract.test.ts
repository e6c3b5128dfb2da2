import { CloudEvent, MQTT } from 'cloudevents';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mqttPublisher } from '../../src/publishers/mqtt/index.js';
import { publisherContract, type ReceivedMessage } from '../../src/testing/index.js';
import { CONTRACT_RELAY_EVENTS, DATABASE_URL } from '../helpers/env.js';
import {
  MQTT_BROKER,
  MQTT_BROKER_URL,
  MqttTap,
  type TappedMessage,
  userProperties,
} from '../helpers/mqtt.js';

const tap = new MqttTap(MQTT_BROKER_URL);
const PREFIX = tap.prefix;
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown): void => {
  unhandled.push(reason);
};

beforeAll(async () => {
  process.on('unhandledRejection', onUnhandled);
  await tap.start();
});

afterAll(async () => {
  await tap.close();
  process.off('unhandledRejection', onUnhandled);
  expect(unhandled).toEqual([]);
});

/**
 * The PUBLISH as the `cloudevents` SDK reads it (binary mode: user properties, Content Type),
 * as plain attributes. The SDK keeps every user property as an attribute, the message's own
 * headers too (`x-note` …); with those left out the event must pass its strict validation.
 */
function sdkEvent({ payload, packet }: TappedMessage): Record<string, unknown> {
  const message = {
    PUBLISH: { 'Content Type': packet.properties?.contentType },
    body: payload,
    headers: userProperties(packet),
  };
  const event = MQTT.toEvent(message);
  if (Array.isArray(event)) throw new Error('one PUBLISH, one event');
  const attributes: Record<string, unknown> = {};
  const strict: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(event)) {
    if (value === undefined || name === 'data' || name === 'data_base64') continue;
    attributes[name] = value;
    if (/^[a-z0-9]+$/.test(name)) strict[name] = value;
  }
  new CloudEvent(strict, true);
  return attributes;
}

publisherContract(
  { describe, it, expect, beforeAll, afterAll },
  {
    name: 'mqtt',
    features: { orderedPerKey: true, brokerDedup: false, persistent: false },
    broker: MQTT_BROKER,
    cloudEvents: true,
    create: async (address, ns, options) => {
      await tap.listen(ns);
      return mqttPublisher({
        url: `mqtt://${address.host}:${address.port}`,
        timeoutMs: 3000,
        clientOptions: { reconnectPeriod: 200 },
        ...(options?.ceSource === undefined ? {} : { ceSource: options.ceSource }),
      });
    },
    topic: (ns) => `${PREFIX}/${ns}/events`,
    read: async (ns, expected): Promise<ReceivedMessage[]> =>
      (await tap.arrived(ns, expected)).map((tapped) => {
        const headers = userProperties(tapped.packet);
        const contentType = tapped.packet.properties?.contentType;
        return {
          eventId: headers['id'] ?? '',
          aggregateId: headers['aggregateid'] ?? '',
          sequence: Number(headers['aggregatesequence']),
          headers: contentType === undefined ? headers : { ...headers, 'content-type': contentType },
          payload: tapped.payload,
          cloudEvent: sdkEvent(tapped),
        };
      }),
    // A wildcard can only be subscribed to: refused before sending.
    poison: (ns, m) => ({ ...m, topic: `${PREFIX}/${ns}/#` }),
    cleanup: async (ns) => {
      await tap.unlisten(ns);
    },
  },
  { relay: { databaseUrl: DATABASE_URL, events: CONTRACT_RELAY_EVENTS } },
);
