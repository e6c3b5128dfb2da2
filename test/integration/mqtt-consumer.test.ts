import { randomUUID } from 'node:crypto';
import { CloudEvent, MQTT } from 'cloudevents';
import { connectAsync, type MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Consumer, consumeMqtt } from '../../src/consumers/mqtt.js';
import { paddedSequence } from '../../src/envelope/attributes.js';
import { createInbox, type InboxHandler } from '../../src/inbox/inbox.js';
import type { Publisher } from '../../src/publishers/contract.js';
import { mqttPublisher } from '../../src/publishers/mqtt/index.js';
import { PREVIOUS_IDS, previousEnvelopeHeaders } from '../../src/testing/index.js';
import { createTestDb, type TestDb, waitFor } from '../helpers/db.js';
import { makeMessage, publishAll } from '../helpers/messages.js';
import { MQTT_BROKER_URL } from '../helpers/mqtt.js';

// Unique per run: test files run in parallel against one shared Mosquitto.
const ROOT = `txo-mcons-${randomUUID().slice(0, 8)}`;

let db: TestDb;
let raw: MqttClient;
let publisher: Publisher;
const consumers: Consumer[] = [];
const clientIds: string[] = [];

beforeAll(async () => {
  db = await createTestDb('mqtt_consumer');
  raw = await connectAsync(MQTT_BROKER_URL, { protocolVersion: 5 });
  publisher = mqttPublisher({ url: MQTT_BROKER_URL, destination: (m) => m.topic! });
});

afterAll(async () => {
  await Promise.all(consumers.map((c) => c.stop()));
  // Drop the persistent sessions left on the broker.
  for (const clientId of clientIds)
    await (await connectAsync(MQTT_BROKER_URL, { clientId, clean: true, protocolVersion: 5 })).endAsync();
  await raw?.endAsync();
  await publisher?.close();
  await db?.close();
});

interface Seen {
  readonly eventId: string;
  readonly aggregateId: string;
  readonly sequence: number;
  readonly contentType: string | undefined;
  readonly data: unknown;
  readonly payload: Buffer;
  readonly headers: Readonly<Record<string, string>>;
}

/** A consumer of `${ROOT}/${name}/#` whose handler records what it was handed. */
async function consumer(name: string): Promise<{ topic: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const handler: InboxHandler = async (_tx, event) => {
    seen.push({
      eventId: event.eventId,
      aggregateId: event.aggregateId,
      sequence: event.sequence,
      contentType: event.contentType,
      data: event.data,
      payload: Buffer.from(event.payload),
      headers: { ...event.headers },
    });
  };
  const clientId = `${ROOT}-${name}`;
  clientIds.push(clientId);
  consumers.push(
    await consumeMqtt({
      inbox: createInbox({ pool: db.pool, consumer: clientId, schema: db.schema }),
      handler,
      url: MQTT_BROKER_URL,
      topic: `${ROOT}/${name}/#`,
      clientId,
    }),
  );
  return { topic: `${ROOT}/${name}/events`, seen };
}

describe('consumeMqtt reads what other CloudEvents producers send', () => {
  it('binary mode by the binding alone: datacontenttype only as the PUBLISH Content Type (§3.1.1)', async () => {
    const { topic, seen } = await consumer('strict');
    const id = randomUUID();
    const aggregateId = ' café "50%off" ';
    const payload = Buffer.from([0, 255, 1, 254]);
    await raw.publishAsync(topic, payload, {
      qos: 1,
      properties: {
        contentType: 'application/octet-stream',
        userProperties: {
          specversion: '1.0',
          id,
          source: 'urn:example:other',
          type: 'order.created',
          time: '2026-12-01T10:11:12.000Z',
          subject: aggregateId,
          aggregatetype: 'order',
          aggregateid: aggregateId,
          sequence: paddedSequence(1),
          schemaversion: '1',
        },
      },
    });
    await waitFor(() => seen.length === 1, { what: 'the event handled' });
    expect(seen[0]).toMatchObject({
      eventId: id,
      aggregateId,
      sequence: 1,
      contentType: 'application/octet-stream',
    });
    expect(Buffer.from(seen[0]!.data as Uint8Array).equals(payload)).toBe(true);
    expect(seen[0]!.headers['ce-datacontenttype']).toBe('application/octet-stream');
    expect(seen[0]!.headers['ce-source']).toBe('urn:example:other');
  });

  it("the cloudevents SDK's own binary MQTT message", async () => {
    const { topic, seen } = await consumer('sdk');
    const event = new CloudEvent({
      id: randomUUID(),
      source: '/orders',
      type: 'order.created',
      subject: 'o-1',
      datacontenttype: 'application/json',
      aggregatetype: 'order',
      aggregateid: 'o-1',
      sequence: paddedSequence(1),
      schemaversion: '2',
      data: { total: 12.5 },
    });
    const message = MQTT.binary(event);
    const userProperties: Record<string, string> = {};
    for (const [name, value] of Object.entries(message.headers))
      if (typeof value === 'string') userProperties[name] = value;
    await raw.publishAsync(topic, JSON.stringify(message.body), {
      qos: 1,
      properties: { contentType: message.PUBLISH!['Content Type']!, userProperties },
    });
    await waitFor(() => seen.length === 1, { what: 'the event handled' });
    expect(seen[0]).toMatchObject({
      eventId: event.id,
      aggregateId: 'o-1',
      sequence: 1,
      contentType: 'application/json',
      data: { total: 12.5 },
    });
    expect(seen[0]!.headers['ce-schemaversion']).toBe('2');
  });

  it('the envelope tx-outbox 0.1 wrote (ce-* user properties) mixed with the current one, in order', async () => {
    const { topic, seen } = await consumer('previous');
    for (let sequence = 1; sequence <= 4; sequence += 1) {
      const messages = PREVIOUS_IDS.map((aggregateId) => makeMessage({ topic, aggregateId, sequence }));
      if (sequence % 2 === 0) await publishAll(publisher, messages);
      else
        for (const m of messages)
          await raw.publishAsync(topic, Buffer.from(m.payload), {
            qos: 1,
            properties: {
              userProperties: previousEnvelopeHeaders(m, 'tx-outbox'),
              contentType: m.contentType,
              payloadFormatIndicator: true,
            },
          });
    }
    const total = PREVIOUS_IDS.length * 4;
    await waitFor(() => seen.length === total, { what: `${total} events handled` });
    for (const id of PREVIOUS_IDS)
      expect(seen.filter((e) => e.aggregateId === id).map((e) => e.sequence)).toEqual([1, 2, 3, 4]);
    expect(
      seen.every((e) => e.contentType === 'application/json' && e.headers['ce-source'] === 'tx-outbox'),
    ).toBe(true);
  });

  it('structured mode: what mqttPublisher sends over MQTT 3.1.1, and a JSON event with Content Type application/cloudevents+json', async () => {
    const { topic, seen } = await consumer('structured');
    const v311 = mqttPublisher({ url: MQTT_BROKER_URL, protocolVersion: 4, ceSource: '/orders' });
    try {
      const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
      const json = makeMessage({
        topic,
        aggregateId: ' café "50%off" ',
        headers: { traceparent },
        payload: Buffer.from('{"a": [1, "}\\"{"], "n": 2.50}'),
      });
      const bytes = makeMessage({
        topic,
        payload: new Uint8Array([0, 255, 7]),
        contentType: 'application/octet-stream',
      });
      await publishAll(v311, [json, bytes]);
      const id = randomUUID();
      const document = JSON.stringify({
        specversion: '1.0',
        id,
        source: 'urn:example:other',
        type: 'order.created',
        aggregatetype: 'order',
        aggregateid: 'o-structured',
        sequence: paddedSequence(1),
        schemaversion: '1', // required of every producer (docs/inbox.md)
        datacontenttype: 'application/json',
        data: { total: 1 },
      });
      await raw.publishAsync(topic, document, {
        qos: 1,
        properties: { contentType: 'application/cloudevents+json; charset=utf-8' },
      });
      await waitFor(() => seen.length === 3, { what: 'three events handled' });
      const byId = (eventId: string): Seen => seen.find((e) => e.eventId === eventId)!;
      expect(byId(json.eventId)).toMatchObject({
        aggregateId: ' café "50%off" ',
        sequence: 1,
        contentType: 'application/json',
        data: { a: [1, '}"{'], n: 2.5 },
      });
      expect(byId(json.eventId).headers).toMatchObject({ traceparent, 'ce-source': '/orders' });
      expect(byId(json.eventId).payload.equals(Buffer.from(json.payload))).toBe(true);
      expect(Buffer.from(byId(bytes.eventId).data as Uint8Array).equals(Buffer.from([0, 255, 7]))).toBe(true);
      expect(byId(id)).toMatchObject({ aggregateId: 'o-structured', data: { total: 1 } });
    } finally {
      await v311.close();
    }
  });
});
