import { connectAsync, type MqttClient, connect as mqttConnect } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeMqtt } from '../../src/consumers/mqtt.js';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';
import { mqttPublisher } from '../../src/publishers/mqtt/index.js';
import { consumerContract, previousEnvelopeHeaders } from '../../src/testing/index.js';
import { DATABASE_URL } from '../helpers/env.js';
import { publishAll } from '../helpers/messages.js';

const MQTT_URL = process.env['MQTT_URL'] ?? 'mqtt://127.0.0.1:1883';
const clientIds = new Set<string>();
let publisher: Publisher;
let raw: MqttClient;

beforeAll(async () => {
  publisher = mqttPublisher({ url: MQTT_URL, destination: (m) => `${m.topic}/${m.aggregateId}` });
  raw = await connectAsync(MQTT_URL, { protocolVersion: 5 });
});
afterAll(async () => {
  await publisher?.close();
  await raw?.endAsync();
  // Drop the persistent sessions the suite left on the broker.
  for (const clientId of clientIds) {
    const c = mqttConnect(MQTT_URL, { clientId, clean: true, protocolVersion: 5 });
    await new Promise<void>((resolve) => c.once('connect', () => resolve()));
    await c.endAsync();
  }
});

/** As tx-outbox 0.1's MQTT 5 publisher sent them: `ce-*` user properties, Content Type, the UTF-8 indicator for JSON. */
async function publishPrevious(messages: readonly OutboxMessage[]): Promise<void> {
  for (const m of messages) {
    await raw.publishAsync(`${m.topic}/${m.aggregateId}`, Buffer.from(m.payload), {
      qos: 1,
      properties: {
        userProperties: previousEnvelopeHeaders(m, 'contract'),
        contentType: m.contentType,
        ...(m.contentType === 'application/json' ? { payloadFormatIndicator: true } : {}),
      },
    });
  }
}

consumerContract(
  { describe, it, expect, beforeAll, afterAll },
  {
    name: 'mqtt',
    databaseUrl: DATABASE_URL,
    publish: (_ns, messages, options) =>
      options?.previous ? publishPrevious(messages) : publishAll(publisher, messages),
    async publishForeign(ns) {
      await raw.publishAsync(`${ns}/raw`, '{}', { qos: 1 });
    },
    envelope: {
      binding: 'mqtt',
      async publish(_ns, m, headers) {
        // A name given twice: two user properties (MQTT.js sends an array value as one each).
        const userProperties: Record<string, string | string[]> = {};
        for (const [name, value] of headers) {
          const before = userProperties[name];
          userProperties[name] = before === undefined ? value : [before, value].flat();
        }
        await raw.publishAsync(`${m.topic}/${m.aggregateId}`, Buffer.from(m.payload), {
          qos: 1,
          properties: { userProperties, contentType: m.contentType },
        });
      },
    },
    consume(ns, setup) {
      // Each instance its own persistent session: both receive every message (no shared subscription).
      const clientId = `${ns}-c${setup.instance}`;
      clientIds.add(clientId);
      return consumeMqtt({
        inbox: setup.inbox,
        handler: setup.handler,
        url: MQTT_URL,
        topic: `${ns}/#`,
        clientId,
        concurrency: setup.concurrency,
        deferMs: setup.deferMs,
        logger: setup.logger,
        ...(setup.signal ? { signal: setup.signal } : {}),
      });
    },
  },
);
