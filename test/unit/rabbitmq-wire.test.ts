import { describe, expect, it } from 'vitest';
import type { OutboxMessage, PublishOutcome } from '../../src/publishers/contract.js';
import { defaultDestination } from '../../src/publishers/core/destination.js';
import {
  defaultRoutingKey,
  frameMaxOf,
  headerTableBytes,
  type Item,
  overFrame,
  PROPERTIES_BUFFER,
  prepare,
  type WireOptions,
} from '../../src/publishers/rabbitmq/wire.js';
import { contractMessage } from '../../src/testing/publisher-contract.js';

const wire: WireOptions = {
  exchange: 'orders',
  destination: (m) => m.topic ?? '',
  source: 'orders-service',
  maxMessageBytes: Number.POSITIVE_INFINITY,
};

function item(prepared: Item | PublishOutcome): Item {
  if ('ok' in prepared) throw new Error(`refused: ${prepared.ok ? 'ok' : prepared.error.message}`);
  return prepared;
}

function permanentMessage(prepared: Item | PublishOutcome): string {
  if (!('ok' in prepared) || prepared.ok) throw new Error('expected a refusal');
  expect(prepared.retryable).toBe(false);
  expect((prepared.error as { code?: unknown }).code).toBe('TXO_PUBLISH_PERMANENT');
  return prepared.error.message;
}

const message = (extra: Partial<OutboxMessage> = {}): OutboxMessage =>
  contractMessage('orders.created', 'o-1', 7, extra);

describe('prepare', () => {
  it('maps a message to a persistent, mandatory AMQP message with the envelope as headers', () => {
    const createdAt = new Date('2025-06-01T12:00:00.999Z');
    const m = message({ createdAt, type: 'order.created', contentType: 'application/json' });
    const got = item(prepare(m, wire));
    expect(got.exchange).toBe('orders');
    expect(got.routingKey).toBe('orders.created');
    expect(got.eventId).toBe(m.eventId);
    expect(got.options).toMatchObject({
      persistent: true,
      mandatory: true,
      messageId: m.eventId,
      type: 'order.created',
      contentType: 'application/json',
      timestamp: Math.floor(createdAt.getTime() / 1000),
    });
    expect(got.options.headers).toEqual({
      traceparent: m.headers['traceparent'],
      cloudEvents_specversion: '1.0',
      cloudEvents_id: m.eventId,
      cloudEvents_source: 'orders-service',
      cloudEvents_type: 'order.created',
      cloudEvents_time: '2025-06-01T12:00:00.999Z',
      cloudEvents_subject: 'o-1',
      cloudEvents_aggregatetype: 'contract',
      cloudEvents_aggregateid: 'o-1',
      cloudEvents_sequence: '0000000000000000007',
      cloudEvents_aggregatesequence: '7',
      cloudEvents_schemaversion: '2',
    });
    expect(Buffer.compare(got.content, Buffer.from(m.payload))).toBe(0);
    expect(got.propertiesBytes).toBeGreaterThan(
      headerTableBytes(got.options.headers as Record<string, string>),
    );
  });

  it('sends the payload bytes without copying them', () => {
    const bytes = new Uint8Array([1, 2, 3, 4, 5]).subarray(1, 4);
    const got = item(prepare(message({ payload: bytes }), wire));
    expect([...got.content]).toEqual([2, 3, 4]);
    expect(got.content.buffer).toBe(bytes.buffer);
  });

  it('chooses the exchange per message when given a function', () => {
    const got = item(
      prepare(message({ aggregateType: 'billing' }), { ...wire, exchange: (m) => m.aggregateType }),
    );
    expect(got.exchange).toBe('billing');
  });

  it('a destination that throws or returns no string fails the message permanently', () => {
    const threw = prepare(message(), {
      ...wire,
      destination: () => {
        throw new Error('no key');
      },
    });
    expect(permanentMessage(threw)).toContain('threw for event');
    expect(permanentMessage(threw)).toContain('no key');
    const notString = prepare(message(), { ...wire, destination: () => 42 as unknown as string });
    expect(permanentMessage(notString)).toContain('must return strings');
  });

  it("refuses names longer than AMQP's 255-byte short strings", () => {
    expect(item(prepare(message({ topic: 'k'.repeat(255) }), wire)).routingKey).toHaveLength(255);
    expect(permanentMessage(prepare(message({ topic: 'k'.repeat(256) }), wire))).toContain(
      "AMQP's 255 bytes",
    );
    expect(permanentMessage(prepare(message(), { ...wire, exchange: () => 'é'.repeat(128) }))).toContain(
      "AMQP's 255 bytes",
    );
  });

  it('refuses a payload over maxMessageBytes, naming the limit', () => {
    const limited = { ...wire, maxMessageBytes: 10 };
    expect(item(prepare(message({ payload: Buffer.alloc(10) }), limited)).content).toHaveLength(10);
    expect(permanentMessage(prepare(message({ payload: Buffer.alloc(11) }), limited))).toMatch(
      /is 11 bytes: larger than the 10 bytes RabbitMQ accepts/,
    );
  });

  it('refuses headers over the 64 KiB amqplib encodes properties into', () => {
    const big = message({ headers: { 'x-big': 'v'.repeat(PROPERTIES_BUFFER) } });
    expect(permanentMessage(prepare(big, wire))).toContain('an AMQP header table can carry');
  });
});

describe('size rules', () => {
  it('headerTableBytes counts name, value and 6 bytes of framing per header, in UTF-8 bytes', () => {
    expect(headerTableBytes({})).toBe(0);
    expect(headerTableBytes({ ab: 'xyz' })).toBe(6 + 2 + 3);
    expect(headerTableBytes({ a: 'é' })).toBe(6 + 1 + 2);
  });

  it("overFrame refuses properties that do not fit the broker's frame_max below 64 KiB", () => {
    const got = item(prepare(message(), wire));
    const sized = { ...got, propertiesBytes: 5_000 };
    expect(overFrame(sized, 131_072)).toBeUndefined();
    expect(overFrame({ ...got, propertiesBytes: 200_000 }, PROPERTIES_BUFFER)).toBeUndefined();
    expect(overFrame(sized, 5_008)).toBeUndefined();
    const refused = overFrame(sized, 5_007);
    expect(refused).toBeDefined();
    expect(permanentMessage(refused!)).toContain("the broker's frame_max of 5007 bytes");
  });

  it('frameMaxOf reads the connection, else assumes 128 KiB', () => {
    expect(frameMaxOf({ frameMax: 4_096 })).toBe(4_096);
    expect(frameMaxOf({ frameMax: 0 })).toBe(131_072);
    expect(frameMaxOf({})).toBe(131_072);
    expect(frameMaxOf(undefined)).toBe(131_072);
  });
});

describe('defaultRoutingKey', () => {
  it('is the shared default destination: the topic, else aggregateType.type', () => {
    expect(defaultRoutingKey).toBe(defaultDestination);
    expect(defaultRoutingKey(message())).toBe('orders.created');
    expect(defaultRoutingKey(message({ topic: null, aggregateType: 'order', type: 'order.paid' }))).toBe(
      'order.order.paid',
    );
  });
});
