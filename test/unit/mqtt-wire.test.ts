import { MQTT } from 'cloudevents';
import { generate, type IPublishPacket } from 'mqtt-packet';
import { describe, expect, it } from 'vitest';
import { envelopeHeaders, structuredAttributes } from '../../src/envelope/bindings.js';
import { fromEnvelope } from '../../src/inbox/message.js';
import type { OutboxMessage, PublishOutcome } from '../../src/publishers/contract.js';
import { defaultTopic, show, topicProblem } from '../../src/publishers/mqtt/topic.js';
import {
  type ConnackLimits,
  inFlightCapacity,
  isPrepared,
  maxPacketBytes,
  type Prepared,
  packetBytes,
  prepareMessage,
  type WireOptions,
} from '../../src/publishers/mqtt/wire.js';
import { makeMessage } from '../helpers/messages.js';

const V5: WireOptions = { destination: defaultTopic, qos: 1, protocolVersion: 5, source: 'tx-outbox' };
const V4: WireOptions = { ...V5, protocolVersion: 4 };

function prepared(message: OutboxMessage, options: WireOptions = V5): Prepared {
  const item = prepareMessage(message, options);
  if (!isPrepared(item)) throw new Error(`expected a PUBLISH, got ${JSON.stringify(item)}`);
  return item;
}

function refused(item: Prepared | PublishOutcome): string {
  if (isPrepared(item) || item.ok) throw new Error('expected a permanent failure');
  expect(item.retryable).toBe(false);
  return item.error.message;
}

/** The bytes MQTT.js (mqtt-packet) writes for the PUBLISH. */
function written(item: Prepared, protocolVersion: 4 | 5): number {
  const packet: IPublishPacket = {
    cmd: 'publish',
    topic: item.topic,
    payload: item.payload,
    qos: item.options.qos ?? 1,
    retain: false,
    dup: false,
    messageId: 42,
    ...(item.options.properties === undefined ? {} : { properties: item.options.properties }),
  };
  return generate(packet, { protocolVersion }).length;
}

function limits(protocolVersion: 4 | 5, serverProperties?: ConnackLimits['serverProperties']): ConnackLimits {
  return { options: { protocolVersion }, serverProperties } as ConnackLimits;
}

describe('MQTT topic rules', () => {
  it('takes message.topic, else aggregateType/type with dots as slashes', () => {
    expect(defaultTopic(makeMessage({ topic: 'a/b' }))).toBe('a/b');
    expect(defaultTopic(makeMessage({ topic: '', aggregateType: 'order', type: 'order.created' }))).toBe(
      'order/order/created',
    );
    expect(defaultTopic(makeMessage({ topic: null, aggregateType: 'billing.eu', type: 'paid' }))).toBe(
      'billing/eu/paid',
    );
  });

  it('refuses what a broker refuses or hangs up over', () => {
    expect(topicProblem('orders/created')).toBeUndefined();
    expect(topicProblem('héllo/✓/日本/🚀')).toBeUndefined();
    expect(topicProblem('')).toBe('is empty');
    expect(topicProblem('a/+/b')).toMatch(/wildcard/);
    expect(topicProblem('a/#')).toMatch(/wildcard/);
    expect(topicProblem('a\u0000b')).toBe('contains a NUL character');
    expect(topicProblem('a\nb')).toMatch(/control character/);
    expect(topicProblem('a\u0085b')).toMatch(/control character/);
    expect(topicProblem('\ud800')).toMatch(/lone surrogate/);
    expect(topicProblem('\uffff')).toMatch(/noncharacter/);
    expect(topicProblem('a'.repeat(65_535))).toBeUndefined();
    expect(topicProblem('a'.repeat(65_536))).toBe('is 65536 bytes long in UTF-8; MQTT allows 65535');
    expect(topicProblem('é'.repeat(33_000))).toMatch(/66000 bytes long/);
  });

  it('shows a topic quoted, escaped, and cut when long', () => {
    expect(show('a"b')).toBe('"a\\"b"');
    expect(show('x'.repeat(300))).toBe(`"${'x'.repeat(200)}…"`);
  });
});

describe('MQTT 5 wire mapping', () => {
  it('the envelope as user properties, the payload untouched, content type and (JSON only) the UTF-8 indicator', () => {
    const headers = {
      traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      'x-tenant': 'acme',
    };
    const json = makeMessage({ topic: 'o/created', headers });
    const item = prepared(json, { ...V5, qos: 2, source: 'orders' });
    expect(item.topic).toBe('o/created');
    expect(item.payload.equals(Buffer.from(json.payload))).toBe(true);
    expect(item.options).toEqual({
      qos: 2,
      properties: {
        userProperties: envelopeHeaders(json, 'orders', 'mqtt'),
        contentType: 'application/json',
        payloadFormatIndicator: true,
      },
    });
    const bytes = makeMessage({ payload: new Uint8Array([0, 255]), contentType: 'application/octet-stream' });
    expect(prepared(bytes).options.properties).toEqual({
      userProperties: envelopeHeaders(bytes, 'tx-outbox', 'mqtt'),
      contentType: 'application/octet-stream',
    });
  });

  it('user properties named as the attributes (§3.1.3.1), values as they are (§3.1.3.2), the headers first', () => {
    const aggregateId = ' café 50%off "q" 😀\ufeff ';
    const message = makeMessage({
      topic: 't',
      aggregateId,
      sequence: 42,
      schemaVersion: 3,
      type: 'order.created/"v2"%41',
      headers: {
        traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
        'x-note': 'a "b" %41',
      },
      createdAt: new Date(Date.UTC(2026, 11, 1, 10, 11, 12, 7)),
    });
    const properties = prepared(message, { ...V5, source: 'urn:example:orders' }).options.properties!;
    expect(Object.entries(properties.userProperties!)).toEqual([
      ['traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'],
      ['x-note', 'a "b" %41'],
      ['specversion', '1.0'],
      ['id', message.eventId],
      ['source', 'urn:example:orders'],
      ['type', 'order.created/"v2"%41'],
      ['time', '2026-12-01T10:11:12.007Z'],
      ['subject', aggregateId],
      ['datacontenttype', 'application/json'],
      ['aggregatetype', 'order'],
      ['aggregateid', aggregateId],
      ['sequence', '0000000000000000042'],
      ['aggregatesequence', '42'],
      ['schemaversion', '3'],
    ]);
    expect(properties.contentType).toBe('application/json');
  });

  it('the cloudevents SDK reads the PUBLISH as the event: every attribute exact, the payload as data', () => {
    const aggregateId = ' ÿ "x" %41 ';
    const message = makeMessage({ topic: 't', aggregateId, sequence: 9, json: { total: 1 } });
    const item = prepared(message, { ...V5, source: '/orders' });
    const event = MQTT.toEvent({
      PUBLISH: { 'Content Type': item.options.properties!.contentType },
      body: item.payload,
      headers: item.options.properties!.userProperties,
    } as Parameters<typeof MQTT.toEvent>[0]);
    expect(event).toMatchObject({
      specversion: '1.0',
      id: message.eventId,
      source: '/orders',
      type: message.type,
      time: message.createdAt.toISOString(),
      subject: aggregateId,
      datacontenttype: 'application/json',
      aggregateid: aggregateId,
      sequence: '0000000000000000009',
      aggregatesequence: '9',
    });
    expect(Buffer.from((event as { data_base64: string }).data_base64, 'base64').equals(item.payload)).toBe(
      true,
    );
  });

  it('uses the destination function; one that throws or returns a non-string fails the message permanently', () => {
    const routed = prepared(makeMessage({ aggregateId: 'o-42' }), {
      ...V5,
      destination: (m) => `c/${m.aggregateId}`,
    });
    expect(routed.topic).toBe('c/o-42');
    const throwing: WireOptions = {
      ...V5,
      destination: () => {
        throw new Error('no route');
      },
    };
    expect(refused(prepareMessage(makeMessage(), throwing))).toMatch(
      /The topic function threw for event .*: no route/,
    );
    const numeric = { ...V5, destination: () => 7 as unknown as string };
    expect(refused(prepareMessage(makeMessage(), numeric))).toMatch(/The topic function returned a number/);
    expect(refused(prepareMessage(makeMessage({ topic: 'a/#' }), V5))).toMatch(
      /MQTT topic "a\/#" of event .* is invalid: it contains a wildcard/,
    );
  });

  it('refuses a header MQTT cannot carry, naming the header and what is wrong', () => {
    expect(refused(prepareMessage(makeMessage({ headers: { 'x-bad': 'a\u0001b' } }), V5))).toMatch(
      /Header "x-bad" of event .* cannot travel as an MQTT user property: its value contains a control character/,
    );
    expect(refused(prepareMessage(makeMessage({ headers: { 'x\u0000': 'v' } }), V5))).toMatch(
      /its name contains a NUL character/,
    );
  });

  it('fails a message the envelope cannot be made for (an invalid createdAt) permanently', () => {
    const broken = makeMessage({ createdAt: new Date(Number.NaN) });
    expect(refused(prepareMessage(broken, V5))).toMatch(/^Event .* cannot be published: /);
  });
});

describe('MQTT 3.1.1 wire mapping', () => {
  it('a CloudEvents structured JSON document: every envelope header as an attribute, the JSON payload as data', () => {
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const json = makeMessage({ topic: 't', headers: { traceparent }, json: { total: 12.5 }, sequence: 3 });
    const item = prepared(json, { ...V4, source: 'orders' });
    expect(item.options).toEqual({ qos: 1 });
    const doc = JSON.parse(item.payload.toString('utf8'));
    expect(doc).toEqual({ ...structuredAttributes(json, 'orders'), data: { total: 12.5 } });
    expect(doc).toEqual({
      traceparent,
      specversion: '1.0',
      id: json.eventId,
      source: 'orders',
      type: json.type,
      time: json.createdAt.toISOString(),
      subject: json.aggregateId,
      datacontenttype: 'application/json',
      aggregatetype: json.aggregateType,
      aggregateid: json.aggregateId,
      sequence: '0000000000000000003',
      aggregatesequence: '3',
      schemaversion: '1',
      data: { total: 12.5 },
    });
    // The payload text is embedded as it is, not re-serialised.
    const spaced = makeMessage({ payload: Buffer.from('{ "a" : [1, 2] }') });
    expect(prepared(spaced, V4).payload.toString('utf8')).toMatch(/,"data":\{ "a" : \[1, 2\] \}\}$/);
  });

  it('awkward values exact, and the cloudevents SDK reads the document (application/cloudevents+json implied, §3.2.1)', () => {
    const aggregateId = ' "50%off" café\\ 😀 ';
    const message = makeMessage({ topic: 't', aggregateId, sequence: 10, json: { a: [1] } });
    const item = prepared(message, { ...V4, source: 'urn:example:orders' });
    const doc = JSON.parse(item.payload.toString('utf8'));
    expect(doc).toMatchObject({
      subject: aggregateId,
      aggregateid: aggregateId,
      sequence: '0000000000000000010',
    });
    const event = MQTT.toEvent({
      PUBLISH: { 'Content Type': 'application/cloudevents+json' },
      body: item.payload.toString('utf8'),
      headers: {},
    } as Parameters<typeof MQTT.toEvent>[0]);
    expect(event).toMatchObject({
      id: message.eventId,
      source: 'urn:example:orders',
      aggregateid: aggregateId,
      aggregatesequence: '10',
      data: { a: [1] },
    });
  });

  it('bytes as data_base64', () => {
    const bytes = makeMessage({
      payload: new Uint8Array([0, 255, 7]),
      contentType: 'application/octet-stream',
    });
    const doc = JSON.parse(prepared(bytes, V4).payload.toString('utf8'));
    expect(doc.datacontenttype).toBe('application/octet-stream');
    expect(Buffer.from(doc.data_base64, 'base64')).toEqual(Buffer.from([0, 255, 7]));
    expect(doc.data).toBeUndefined();
  });

  it('carries headers that are not attribute names in txoheaders, and refuses a JSON payload that is not JSON', () => {
    const tenant = makeMessage({ headers: { 'x-tenant': 'acme', TraceParent: 'x' } });
    const { data: _data, ...doc } = JSON.parse(prepared(tenant, V4).payload.toString('utf8'));
    expect(JSON.parse(doc.txoheaders)).toEqual({ 'x-tenant': 'acme', TraceParent: 'x' });
    const read = fromEnvelope(doc, Buffer.alloc(0));
    expect(read.headers).toMatchObject({ 'x-tenant': 'acme', TraceParent: 'x' });
    expect(read.headers).not.toHaveProperty('txoheaders');
    const notJson = makeMessage({ payload: Buffer.from('{nope') });
    expect(refused(prepareMessage(notJson, V4))).toMatch(/application\/json payload is not valid JSON/);
  });
});

describe('MQTT packet sizes and CONNACK limits', () => {
  it('packetBytes is the size MQTT.js writes, and maxBytes bounds it', () => {
    const cases: Array<[OutboxMessage, WireOptions]> = [
      [makeMessage({ topic: 'a/b' }), V5],
      [makeMessage({ topic: 'héllo/日本', headers: { 'x-unicode': 'héllo ✓ 🚀', traceparent: 'x' } }), V5],
      [makeMessage({ payload: Buffer.alloc(300, 1), contentType: 'application/octet-stream' }), V5],
      [makeMessage({ payload: Buffer.alloc(20_000, 1), contentType: 'application/octet-stream' }), V5],
      // Raw UTF-8 user property values: up to 4 bytes per character.
      [makeMessage({ aggregateId: '😀'.repeat(127), type: 'é'.repeat(200), headers: { 'x-a': 'b' } }), V5],
      [makeMessage({ aggregateId: ' "%" ', json: { ü: '日本' } }), V4],
      [makeMessage({ topic: 'a/b', json: { n: 1 } }), V4],
      [
        makeMessage({
          topic: 't'.repeat(500),
          payload: Buffer.alloc(3_000_000, 1),
          contentType: 'application/octet-stream',
        }),
        V4,
      ],
      [makeMessage({ payload: Buffer.alloc(3_000_000, 1), contentType: 'application/octet-stream' }), V5],
    ];
    for (const [message, options] of cases) {
      const item = prepareMessage(message, options);
      if (!isPrepared(item)) throw new Error(`not prepared: ${JSON.stringify(item)}`);
      const size = written(item, options.protocolVersion);
      expect(packetBytes(item)).toBe(size);
      expect(item.maxBytes).toBeGreaterThanOrEqual(size);
    }
  });

  it('the broker Maximum Packet Size (MQTT 5 only), else MQTT’s own limit', () => {
    expect(maxPacketBytes(limits(5, { maximumPacketSize: 2048 }))).toBe(2048);
    expect(maxPacketBytes(limits(5))).toBe(268_435_460);
    expect(maxPacketBytes(limits(4, { maximumPacketSize: 2048 }))).toBe(268_435_460);
  });

  it('maxInFlight lowered to the broker Receive Maximum (MQTT 5 only), at most 65535', () => {
    expect(inFlightCapacity(1024, limits(5, { receiveMaximum: 20 }))).toBe(20);
    expect(inFlightCapacity(5, limits(5, { receiveMaximum: 20 }))).toBe(5);
    expect(inFlightCapacity(1024, limits(5))).toBe(1024);
    expect(inFlightCapacity(1024, limits(4, { receiveMaximum: 20 }))).toBe(1024);
  });
});
