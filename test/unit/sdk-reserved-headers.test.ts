/**
 * The header names `enqueue` reserves because the official cloudevents SDK acts on them when
 * they arrive as attributes: MQTT 5 carries an event's headers as user properties, which
 * `MQTT.toEvent` keeps as attributes (names as they are), and structured mode (webhook batches,
 * MQTT 3.1.1) carries the `[a-z0-9]+` ones as attributes of the JSON event. Each case shows the
 * SDK failing on the name, so none is reserved on a guess.
 */
import { inspect } from 'node:util';
import { type CloudEvent, HTTP, MQTT } from 'cloudevents';
import { describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { headersJsonOf } from '../../src/producer/headers.js';

const ATTRIBUTES = {
  specversion: '1.0',
  id: 'e-1',
  source: 'tx-outbox',
  type: 'order.created',
  datacontenttype: 'application/json',
  subject: 'o-1',
  time: '2024-01-01T00:00:00.000Z',
};

/** An MQTT 5 message in binary mode with the header as a user property, read by the SDK. */
const mqtt5 = (name: string, value: string) =>
  MQTT.toEvent({
    PUBLISH: { 'Content Type': 'application/json' },
    body: { n: 1 },
    headers: { ...ATTRIBUTES, [name]: value },
  } as never) as CloudEvent<unknown>;

/** A webhook batch (HTTP batched mode) whose one event carries the header as an attribute. */
const batch = (name: string, value: string) =>
  HTTP.toEvent({
    headers: { 'content-type': 'application/cloudevents-batch+json' },
    body: JSON.stringify([{ ...ATTRIBUTES, [name.toLowerCase()]: value, data: { n: 1 } }]),
  });

function refused(name: string): OutboxValidationError {
  try {
    headersJsonOf({ [name]: 'v' }, 'event.headers', {});
  } catch (error) {
    if (error instanceof OutboxValidationError) return error;
    throw error;
  }
  throw new Error(`enqueue accepted the header ${name}`);
}

describe('header names the cloudevents SDK acts on are refused at enqueue', () => {
  it('schemaurl: toEvent throws on a 1.0 event (MQTT 5 and a webhook batch)', () => {
    expect(() => mqtt5('schemaurl', 'https://example.com/s')).toThrow(/cannot set schemaurl/);
    expect(() => batch('schemaurl', 'https://example.com/s')).toThrow(/cannot set schemaurl/);
    expect(refused('schemaurl').message).toMatch(/CloudEvents 0\.3 attribute/);
    expect(refused('SchemaURL').message).toMatch(/CloudEvents 0\.3 attribute/);
  });

  it('datacontentencoding: structured HTTP decodes the data as base64 (or throws on JSON data)', () => {
    const structured = (data: unknown) =>
      HTTP.toEvent({
        headers: { 'content-type': 'application/cloudevents+json' },
        body: JSON.stringify({ ...ATTRIBUTES, datacontentencoding: 'base64', data }),
      }) as CloudEvent<unknown>;
    expect(structured('hello').data).not.toBe('hello');
    expect(() => structured({ n: 1 })).toThrow(TypeError);
    expect(refused('datacontentencoding').message).toMatch(/CloudEvents 0\.3 attribute/);
  });

  it("validate: a batch's toEvent throws (it validates each event, and the attribute replaced the method)", () => {
    expect(() => batch('validate', 'v')).toThrow(/validate is not a function/);
    expect(() => mqtt5('validate', 'v').validate()).toThrow(/validate is not a function/);
    expect(refused('validate').message).toMatch(/method of the cloudevents SDK/);
  });

  // MQTT 5 keeps the name's case: an attribute named like a method shadows it on the event.
  it.each([
    ['emit', (e: CloudEvent<unknown>) => e.emit()],
    ['cloneWith', (e: CloudEvent<unknown>) => e.cloneWith({ subject: 'x' }, false)],
    ['toJSON', (e: CloudEvent<unknown>) => e.toJSON()],
    ['toString', (e: CloudEvent<unknown>) => inspect(e)],
    ['toString', (e: CloudEvent<unknown>) => HTTP.structured(e)],
    ['toLocaleString', (e: CloudEvent<unknown>) => e.toLocaleString()],
    ['valueOf', (e: CloudEvent<unknown>) => HTTP.binary(e)],
    ['constructor', (e: CloudEvent<unknown>) => HTTP.binary(e)],
    ['hasOwnProperty', (e: CloudEvent<unknown>) => HTTP.binary(e)],
    ['isPrototypeOf', (e: CloudEvent<unknown>) => HTTP.binary(e)],
    ['propertyIsEnumerable', (e: CloudEvent<unknown>) => HTTP.binary(e)],
    ['__defineGetter__', (e: CloudEvent<unknown>) => HTTP.binary(e)],
    ['__defineSetter__', (e: CloudEvent<unknown>) => HTTP.binary(e)],
    ['__lookupGetter__', (e: CloudEvent<unknown>) => HTTP.binary(e)],
    ['__lookupSetter__', (e: CloudEvent<unknown>) => HTTP.binary(e)],
  ] as const)('%s: an event read from MQTT 5 with it throws in the SDK (%s)', (name, use) => {
    const event = mqtt5(name, 'v');
    expect(() => use(event)).toThrow(TypeError);
    // The same event without that property works.
    expect(() => use(mqtt5('x', 'v'))).not.toThrow();
    expect(refused(name).message).toMatch(/method of the cloudevents SDK/);
    expect(refused(name.toUpperCase()).message).toMatch(/method of the cloudevents SDK/);
  });

  it("txoheaders: tx-outbox's own structured-mode extension (the SDK itself takes it as any extension)", () => {
    expect(() => batch('txoheaders', '{}')).not.toThrow();
    expect(refused('txoheaders').message).toMatch(/tx-outbox's own CloudEvents extension/);
  });

  it('ordinary names still go through', () => {
    expect(
      JSON.parse(headersJsonOf({ traceparent: 't', 'x-tenant': 'acme', emitter: 'e' }, 'h', {})),
    ).toEqual({
      traceparent: 't',
      'x-tenant': 'acme',
      emitter: 'e',
    });
  });
});
