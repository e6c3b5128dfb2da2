import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mqttPublisher } from '../../src/publishers/mqtt/index.js';
import { publisherContract, type ReceivedMessage } from '../../src/testing/index.js';
import { DATABASE_URL } from '../helpers/env.js';
import { MQTT_BROKER, MQTT_BROKER_URL, MqttTap, userProperties } from '../helpers/mqtt.js';

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

publisherContract(
  { describe, it, expect, beforeAll, afterAll },
  {
    name: 'mqtt',
    features: { orderedPerKey: true, brokerDedup: false, persistent: false },
    broker: MQTT_BROKER,
    create: async (address, ns) => {
      await tap.listen(ns);
      return mqttPublisher({
        url: `mqtt://${address.host}:${address.port}`,
        timeoutMs: 3000,
        clientOptions: { reconnectPeriod: 200 },
      });
    },
    topic: (ns) => `${PREFIX}/${ns}/events`,
    read: async (ns, expected): Promise<ReceivedMessage[]> =>
      (await tap.arrived(ns, expected)).map(({ payload, packet }) => {
        const headers = userProperties(packet);
        return {
          eventId: headers['ce-id'] ?? '',
          aggregateId: headers['ce-aggregateid'] ?? '',
          sequence: Number(headers['ce-sequence']),
          headers,
          payload,
        };
      }),
    // A wildcard can only be subscribed to: refused before sending.
    poison: (ns, m) => ({ ...m, topic: `${PREFIX}/${ns}/#` }),
    cleanup: async (ns) => {
      await tap.unlisten(ns);
    },
  },
  { relay: { databaseUrl: DATABASE_URL } },
);
