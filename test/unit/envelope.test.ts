import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { recordHeaders } from '../../src/consumers/kafka/consumer.js';
import { ATTRIBUTE_NAMES, envelopeAttributes, paddedSequence } from '../../src/envelope/attributes.js';
import { type EnvelopeBinding, envelopeHeaders, structuredAttributes } from '../../src/envelope/bindings.js';
import { ceSourceOf } from '../../src/envelope/ce-source.js';
import { percentDecode, percentEncode } from '../../src/envelope/percent.js';
import { readEnvelope } from '../../src/envelope/read.js';
import { OutboxValidationError } from '../../src/errors.js';
import { fromEnvelope } from '../../src/inbox/message.js';
import type { OutboxMessage } from '../../src/publishers/contract.js';
import { previousEnvelopeHeaders } from '../../src/testing/envelopes.js';

/** Values every binding must carry byte for byte. */
const AWKWARD = [
  ' leading',
  'trailing ',
  '  both  ',
  '50%off',
  '%41',
  '%',
  'a"b',
  '"quoted"',
  "it's",
  'café',
  '日本語',
  '😀 emoji',
  'nbsp\u00a0inside',
  '\u00a0nbsp-edge\u00a0',
  '\ufeffbom',
  'x=y;z,w',
  'back\\slash',
  '+plus & ampersand',
  'ÿ latin1 edge',
  'a'.repeat(255),
];

function message(aggregateId: string, sequence = 42, extra: Partial<OutboxMessage> = {}): OutboxMessage {
  return {
    id: '1',
    eventId: randomUUID(),
    aggregateType: 'order',
    aggregateId,
    sequence,
    type: 'order.created',
    schemaVersion: 3,
    topic: null,
    payload: Buffer.from('{}'),
    contentType: 'application/json',
    headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', 'x-tenant': 'acme' },
    createdAt: new Date('2026-12-01T10:11:12.345Z'),
    attempts: 0,
    ...extra,
  };
}

describe('percent-encoding (HTTP binding §3.1.3.2)', () => {
  it('leaves visible ASCII other than " and % untouched', () => {
    const plain = Array.from({ length: 0x7f - 0x21 }, (_, i) => String.fromCharCode(0x21 + i))
      .filter((c) => c !== '"' && c !== '%')
      .join('');
    expect(percentEncode(plain)).toBe(plain);
  });

  it('encodes space, " and % and everything outside U+0021–U+007E as UTF-8 %XX', () => {
    expect(percentEncode(' a"b%c ')).toBe('%20a%22b%25c%20');
    expect(percentEncode('café')).toBe('caf%C3%A9');
    expect(percentEncode('😀')).toBe('%F0%9F%98%80');
    expect(percentEncode('\u007f')).toBe('%7F');
  });

  it('round-trips every awkward value, and every encoded value is visible ASCII', () => {
    for (const value of AWKWARD) {
      const encoded = percentEncode(value);
      expect(encoded).toMatch(/^[\x21-\x7e]*$/);
      expect(encoded).not.toMatch(/"/);
      expect(percentDecode(encoded)).toBe(value);
    }
  });

  it('decodes exactly once', () => {
    expect(percentDecode('%2541')).toBe('%41');
  });

  it('undoes a quoted string before decoding', () => {
    expect(percentDecode('"a\\"b%20c"')).toBe('a"b c');
  });

  it('refuses a % without two hex digits and bytes that are not UTF-8', () => {
    expect(() => percentDecode('50%off')).toThrow(/two hex digits/);
    expect(() => percentDecode('%4')).toThrow(/two hex digits/);
    expect(() => percentDecode('%C3')).toThrow(/not UTF-8/);
    expect(() => percentDecode('%FF%FE')).toThrow(/not UTF-8/);
    expect(() => percentDecode('%ED%A0%80')).toThrow(/not UTF-8/); // an encoded surrogate
  });

  it("reads a lenient sender's raw non-ASCII as itself", () => {
    expect(percentDecode('café%20au lait')).toBe('café au lait');
  });
});

describe('sequence (Sequence extension)', () => {
  it('is zero-padded so string order is number order', () => {
    const values = [1, 2, 9, 10, 99, 100, 12_345, 2 ** 31, Number.MAX_SAFE_INTEGER];
    const padded = values.map((v) => paddedSequence(v));
    expect([...padded].sort()).toEqual(padded);
    expect(padded.every((p) => p.length === 19)).toBe(true);
    expect(paddedSequence(9_223_372_036_854_775_807n)).toBe('9223372036854775807');
  });

  it('carries the plain integer as aggregatesequence', () => {
    const attributes = envelopeAttributes(message('a', 42), 'svc');
    expect(attributes.sequence).toBe('0000000000000000042');
    expect(attributes.aggregatesequence).toBe('42');
  });
});

const BINDINGS: EnvelopeBinding[] = ['http', 'nats', 'kafka', 'amqp', 'mqtt', 'redis'];

describe('every binding reads back what was written', () => {
  for (const binding of BINDINGS) {
    it(`${binding}: every attribute of every awkward aggregate id`, () => {
      for (const id of AWKWARD) {
        const sent = message(id);
        const headers = envelopeHeaders(sent, 'urn:svc:orders', binding);
        // AMQP carries the content type as a message property: its consumer passes it along.
        if (binding === 'amqp') headers['content-type'] = sent.contentType;
        const got = fromEnvelope(headers, sent.payload);
        expect(got).toMatchObject({
          eventId: sent.eventId,
          type: sent.type,
          aggregateType: sent.aggregateType,
          aggregateId: id,
          sequence: 42,
          schemaVersion: 3,
          contentType: 'application/json',
        });
        expect(got.headers['ce-subject']).toBe(id);
        expect(got.headers['ce-source']).toBe('urn:svc:orders');
        expect(got.headers['ce-time']).toBe('2026-12-01T10:11:12.345Z');
        expect(got.headers['ce-sequence']).toBe('0000000000000000042');
        expect(got.headers['ce-datacontenttype']).toBe('application/json');
        expect(got.headers['traceparent']).toBe(sent.headers['traceparent']);
        expect(got.headers['x-tenant']).toBe('acme');
      }
    });
  }

  it('reading the normalised headers again gives the same message (no second decoding)', () => {
    for (const binding of BINDINGS) {
      for (const id of AWKWARD) {
        const sent = message(id);
        const headers = envelopeHeaders(sent, 'urn:svc:orders', binding);
        if (binding === 'amqp') headers['content-type'] = sent.contentType;
        const once = fromEnvelope(headers, sent.payload);
        expect(fromEnvelope(once.headers, sent.payload)).toEqual(once);
      }
    }
  });

  it('names attributes as each binding says', () => {
    const sent = message('a');
    expect(Object.keys(envelopeHeaders(sent, 's', 'http'))).toEqual([
      'traceparent',
      'x-tenant',
      ...ATTRIBUTE_NAMES.filter((n) => n !== 'datacontenttype').map((n) => `ce-${n}`),
      'content-type',
    ]);
    expect(envelopeHeaders(sent, 's', 'nats')['ce-datacontenttype']).toBe('application/json');
    expect(envelopeHeaders(sent, 's', 'kafka')).toMatchObject({
      ce_id: sent.eventId,
      'content-type': 'application/json',
    });
    expect(envelopeHeaders(sent, 's', 'kafka')).not.toHaveProperty('ce_datacontenttype');
    expect(envelopeHeaders(sent, 's', 'amqp')).toMatchObject({ cloudEvents_id: sent.eventId });
    expect(envelopeHeaders(sent, 's', 'amqp')).not.toHaveProperty('cloudEvents_datacontenttype');
    expect(envelopeHeaders(sent, 's', 'mqtt')).toMatchObject({
      id: sent.eventId,
      datacontenttype: 'application/json',
    });
  });

  it('percent-encodes on HTTP and NATS only', () => {
    const sent = message(' café ');
    expect(envelopeHeaders(sent, 's', 'http')['ce-aggregateid']).toBe('%20caf%C3%A9%20');
    expect(envelopeHeaders(sent, 's', 'nats')['ce-subject']).toBe('%20caf%C3%A9%20');
    expect(envelopeHeaders(sent, 's', 'kafka')['ce_aggregateid']).toBe(' café ');
    expect(envelopeHeaders(sent, 's', 'amqp')['cloudEvents_aggregateid']).toBe(' café ');
    expect(envelopeHeaders(sent, 's', 'mqtt')['aggregateid']).toBe(' café ');
  });

  it('AMQP: reads the cloudEvents: separator too (v1.0.2 and other producers)', () => {
    const sent = message(' café ');
    const written = envelopeHeaders(sent, 's', 'amqp');
    const colon: Record<string, string> = { 'content-type': 'application/json' };
    for (const [name, value] of Object.entries(written))
      colon[name.replace(/^cloudEvents_/, 'cloudEvents:')] = value;
    expect(readEnvelope(colon).form).toBe('amqp');
    expect(fromEnvelope(colon, sent.payload)).toMatchObject({
      eventId: sent.eventId,
      aggregateId: ' café ',
      sequence: 42,
    });
  });

  it('structured mode: unprefixed attributes, values as they are; other headers in txoheaders', () => {
    const sent = message(' café ', 42, {
      headers: { traceparent: 't', 'x-tenant': 'acme', TraceState: 'a=1', 'X-Note': '"%41"' },
    });
    const event = structuredAttributes(sent, 's');
    expect(event).toMatchObject({ id: sent.eventId, subject: ' café ', traceparent: 't' });
    expect(event).not.toHaveProperty('x-tenant');
    expect(JSON.parse(event['txoheaders']!)).toEqual({
      'x-tenant': 'acme',
      TraceState: 'a=1',
      'X-Note': '"%41"',
    });
    const read = fromEnvelope(event, sent.payload);
    expect(read.aggregateId).toBe(' café ');
    expect(read.headers).toMatchObject(sent.headers);
    expect(read.headers).not.toHaveProperty('txoheaders');
    // Packed names an envelope reader would take for an attribute are not unpacked.
    const forged = {
      ...event,
      txoheaders: JSON.stringify({ 'ce-aggregatesequence': '1', ce_id: 'x', aggregateid: 'B', ok: 'y' }),
    };
    const again = fromEnvelope(forged, sent.payload);
    expect(again.aggregateId).toBe(' café ');
    expect(again.headers).toMatchObject({ ok: 'y' });
    expect(again.headers).not.toHaveProperty('ce_id');
    expect(fromEnvelope(again.headers, sent.payload).aggregateId).toBe(' café ');
    // A foreign txoheaders that is not an object of strings stays as it is.
    expect(fromEnvelope({ ...event, txoheaders: '[1]' }, sent.payload).headers['txoheaders']).toBe('[1]');
  });
});

describe('reading what earlier versions wrote (ce-* on every transport, values as they are)', () => {
  const old = (id: string): Record<string, string> => ({
    traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    'ce-specversion': '1.0',
    'ce-id': '0190a0c2-5f0e-7c4e-8a7f-1234567890ab',
    'ce-type': 'order.created',
    'ce-source': 'tx-outbox',
    'ce-time': '2026-12-01T10:11:12.345Z',
    'ce-subject': id,
    'ce-datacontenttype': 'application/json',
    'ce-aggregatetype': 'order',
    'ce-aggregateid': id,
    'ce-sequence': '7',
    'ce-schemaversion': '2',
  });

  it('takes the values literally: no percent-decoding without ce-aggregatesequence', () => {
    for (const id of ['50%off', '%41', 'a%20b', 'plain']) {
      const got = fromEnvelope(old(id), Buffer.from('{}'));
      expect(got.aggregateId).toBe(id);
      expect(got.sequence).toBe(7);
      expect(got.schemaVersion).toBe(2);
      expect(readEnvelope(old(id)).form).toBe('ce');
    }
  });

  it('reads old ce-* MQTT user properties and Redis fields', () => {
    expect(fromEnvelope(old('k'), Buffer.alloc(0)).aggregateId).toBe('k');
  });
});

describe('refusals name the header', () => {
  it('a missing id', () => {
    expect(() => fromEnvelope({ foo: 'bar' }, Buffer.alloc(0))).toThrow(/headers\.ce-id: is missing/);
  });

  it('an invalid percent-encoding in a new-format header', () => {
    const headers = envelopeHeaders(message('a'), 's', 'nats');
    headers['ce-aggregateid'] = '%ZZ';
    expect(() => fromEnvelope(headers, Buffer.alloc(0))).toThrow(OutboxValidationError);
    expect(() => fromEnvelope(headers, Buffer.alloc(0))).toThrow(
      /headers\.ce-aggregateid: is not valid percent-encoding/,
    );
  });

  it('a sequence that disagrees with aggregatesequence', () => {
    const headers = envelopeHeaders(message('a'), 's', 'kafka');
    headers['ce_sequence'] = '0000000000000000041';
    expect(() => fromEnvelope(headers, Buffer.alloc(0))).toThrow(/headers\.ce_sequence/);
  });

  it('a sequence that is not a positive integer', () => {
    for (const bad of ['0', '-1', '1e3', '1.5', ' 7', '99999999999999999999']) {
      const headers = envelopeHeaders(message('a'), 's', 'mqtt');
      headers['aggregatesequence'] = bad;
      headers['sequence'] = bad;
      expect(() => fromEnvelope(headers, Buffer.alloc(0))).toThrow(
        /headers\.aggregatesequence: is not a positive integer/,
      );
    }
  });
});

describe('the schema version: an integer from 1 to 2147483647, or the message is refused', () => {
  const BINDINGS: readonly EnvelopeBinding[] = ['http', 'nats', 'kafka', 'amqp', 'mqtt', 'redis'];
  const nameOf = (binding: EnvelopeBinding) =>
    ({ http: 'ce-', nats: 'ce-', kafka: 'ce_', amqp: 'cloudEvents_', mqtt: '', redis: '' })[binding] +
    'schemaversion';

  it("reads the versions enqueue writes, on every binding and in 0.1's form", () => {
    for (const binding of BINDINGS)
      for (const version of [1, 2, 2_147_483_647]) {
        const sent = message('v', 1, { schemaVersion: version });
        expect(fromEnvelope(envelopeHeaders(sent, 's', binding), Buffer.alloc(0)).schemaVersion).toBe(
          version,
        );
      }
    const old = previousEnvelopeHeaders(message('v', 1, { schemaVersion: 7 }), 's');
    expect(fromEnvelope(old, Buffer.alloc(0)).schemaVersion).toBe(7);
  });

  it('refuses a malformed version naming the header and the value, never reading it as 1', () => {
    const bad = [
      'two',
      '99999999999999999999',
      '-1',
      '1.5',
      '0',
      '2147483648',
      '1e3',
      ' 1',
      '0x10',
      '1 ',
      '+1',
    ];
    for (const binding of BINDINGS)
      for (const value of bad) {
        const headers = envelopeHeaders(message('v'), 's', binding);
        headers[nameOf(binding)] = value;
        expect(() => fromEnvelope(headers, Buffer.alloc(0)), `${binding} ${value}`).toThrow(
          new RegExp(
            `^headers\\.${nameOf(binding)}: is ${JSON.stringify(value).replace(/[.+]/g, '\\$&')}, not a schema version \\(an integer from 1 to 2147483647\\)`,
          ),
        );
      }
  });

  it('refuses a message without one (every tx-outbox message carries it), naming the header', () => {
    for (const binding of BINDINGS) {
      const headers = envelopeHeaders(message('v'), 's', binding);
      delete headers[nameOf(binding)];
      expect(() => fromEnvelope(headers, Buffer.alloc(0)), binding).toThrow(
        new RegExp(`^headers\\.${nameOf(binding)}: is missing`),
      );
      headers[nameOf(binding)] = '';
      expect(() => fromEnvelope(headers, Buffer.alloc(0)), binding).toThrow(
        new RegExp(`^headers\\.${nameOf(binding)}: is missing`),
      );
    }
    const old = previousEnvelopeHeaders(message('v'), 's');
    delete old['ce-schemaversion'];
    expect(() => fromEnvelope(old, Buffer.alloc(0))).toThrow(/^headers\.ce-schemaversion: is missing/);
  });
});

describe("a missing id is named as the envelope's own form spells it", () => {
  it('on every binding, and not taken for a second envelope form', () => {
    const ids = {
      http: 'ce-id',
      nats: 'ce-id',
      kafka: 'ce_id',
      amqp: 'cloudEvents_id',
      mqtt: 'id',
      redis: 'id',
    };
    for (const [binding, name] of Object.entries(ids) as Array<[EnvelopeBinding, string]>) {
      const headers = envelopeHeaders(message('m'), 's', binding);
      delete headers[name];
      let error: unknown;
      try {
        fromEnvelope(headers, Buffer.alloc(0));
      } catch (caught) {
        error = caught;
      }
      expect(error, binding).toBeInstanceOf(OutboxValidationError);
      expect((error as Error).message, binding).toMatch(new RegExp(`^headers\\.${name}: is missing`));
    }
    // The AMQP binding's older separator, as another producer spells it.
    const colon: Record<string, string> = {};
    for (const [name, value] of Object.entries(envelopeHeaders(message('m'), 's', 'amqp')))
      colon[name.replace('cloudEvents_', 'cloudEvents:')] = value;
    delete colon['cloudEvents:id'];
    expect(() => fromEnvelope(colon, Buffer.alloc(0))).toThrow(/^headers\.cloudEvents:id: is missing/);
    // Two forms and no id: that is what is wrong, and what the refusal says.
    const mixed: Record<string, string> = { ...envelopeHeaders(message('m'), 's', 'kafka'), 'ce-type': 'x' };
    delete mixed['ce_id'];
    expect(() => fromEnvelope(mixed, Buffer.alloc(0))).toThrow(/another envelope form's prefix/);
  });
});

describe('ceSourceOf: the CloudEvents source (a URI-reference)', () => {
  it('accepts URLs, URNs, paths and the default', () => {
    for (const ok of [
      'https://orders.example.com/x?y=1#z',
      'http://[::1]:8080/a',
      '//[v1.x]/p',
      'http://u@[fe80::1]',
      'urn:example:orders',
      '/orders',
      'tx-outbox',
      'a%20b',
    ]) {
      expect(ceSourceOf(ok)).toBe(ok);
    }
    expect(ceSourceOf(undefined)).toBe('tx-outbox');
  });

  it('refuses what is not one, naming the field', () => {
    for (const bad of [
      '',
      'orders service',
      'http://[bad"',
      '50%',
      '1http://x',
      'café',
      7,
      `urn:${'x'.repeat(252)}`,
    ]) {
      expect(() => ceSourceOf(bad)).toThrow(/^ceSource: /);
    }
  });
});

describe('a message that could mean two things, or that the inbox could not store, is refused naming the header', () => {
  const base = () => envelopeHeaders(message('agg'), 's', 'kafka');

  it('two envelope forms side by side', () => {
    expect(() => fromEnvelope({ ...base(), 'ce-id': randomUUID() }, Buffer.alloc(0))).toThrow(
      /one message, one envelope form/,
    );
    const amqp = envelopeHeaders(message('agg'), 's', 'amqp');
    expect(() => fromEnvelope({ ...amqp, 'cloudEvents:aggregateid': 'other' }, Buffer.alloc(0))).toThrow(
      /headers\.cloudEvents:aggregateid: carries another envelope form's prefix/,
    );
    expect(() => fromEnvelope({ ...base(), 'ce-aggregatesequence': '1' }, Buffer.alloc(0))).toThrow(
      /another envelope form's prefix/,
    );
  });

  it('one attribute under two names', () => {
    const nats = envelopeHeaders(message('caseA'), 's', 'nats');
    expect(() => fromEnvelope({ ...nats, 'CE-AGGREGATEID': 'caseB' }, Buffer.alloc(0))).toThrow(
      /headers\.CE-AGGREGATEID: repeats the attribute aggregateid \(also in ce-aggregateid\)/,
    );
  });

  it('ce-aggregatesequence beside a ce-sequence that is not zero-padded (neither form)', () => {
    const sent = message('a%41', 1);
    const old = { ...previousEnvelopeHeaders(sent, 's'), 'ce-aggregatesequence': '1' };
    expect(() => fromEnvelope(old, Buffer.alloc(0))).toThrow(/headers\.ce-sequence: is not zero-padded/);
    // An undefined entry is no header: the 0.1 message reads as it is.
    const unset = { ...previousEnvelopeHeaders(sent, 's'), 'ce-aggregatesequence': undefined };
    expect(fromEnvelope(unset, Buffer.alloc(0)).aggregateId).toBe('a%41');
  });

  it('a NUL anywhere, control characters, U+FFFD or more than 255 bytes in an id', () => {
    const nats = envelopeHeaders(message('agg'), 's', 'nats');
    expect(() => fromEnvelope({ ...nats, 'ce-aggregateid': 'a%00b' }, Buffer.alloc(0))).toThrow(
      /headers\.ce-aggregateid: contains a NUL/,
    );
    expect(() => fromEnvelope({ ...nats, 'ce-source': 's%00' }, Buffer.alloc(0))).toThrow(
      /headers\.ce-source/,
    );
    // Another tool's binary header with a NUL (Spring Kafka's dead-letter offsets): left out, the message kept.
    const binary = fromEnvelope(
      { ...base(), 'kafka_dlt-original-offset': '\u0000\u0000\u0007' },
      Buffer.alloc(0),
    );
    expect(binary.aggregateId).toBe('agg');
    expect(binary.headers).not.toHaveProperty('kafka_dlt-original-offset');
    for (const id of ['a\r\nb', 'bad\ufffd', 'é'.repeat(128)]) {
      expect(() => fromEnvelope({ ...base(), ce_aggregateid: id, ce_subject: id }, Buffer.alloc(0))).toThrow(
        /headers\.ce_aggregateid: .*which tx-outbox never sends/,
      );
    }
  });

  it('own entries only, __proto__ kept, a value that is not a string refused', () => {
    // A computed key is an own property named __proto__ (a literal one would set the prototype).
    const proto = fromEnvelope({ ...base(), ['__proto__']: 'x' }, Buffer.alloc(0));
    expect(Object.getOwnPropertyDescriptor(proto.headers, '__proto__')?.value).toBe('x');
    const withProto = base();
    Object.defineProperty(withProto, '__proto__', { value: 'v', enumerable: true });
    expect(
      Object.getOwnPropertyDescriptor(fromEnvelope(withProto, Buffer.alloc(0)).headers, '__proto__')?.value,
    ).toBe('v');
    const inherited = Object.create({ 'x-inherited': 'no' }) as Record<string, string>;
    Object.assign(inherited, base());
    expect(fromEnvelope(inherited, Buffer.alloc(0)).headers).not.toHaveProperty('x-inherited');
    expect(() =>
      fromEnvelope({ ...base(), ce_schemaversion: 3 as unknown as string }, Buffer.alloc(0)),
    ).toThrow(/headers\.ce_schemaversion: is a number, not a string/);
  });
});

describe('a consumer refuses a record that repeats an envelope header', () => {
  it('Kafka: a repeated attribute header is refused; a repeated foreign header keeps its last value', () => {
    const sent = message('A');
    const headers = new Map<Buffer, Buffer>();
    for (const [name, value] of Object.entries(envelopeHeaders(sent, 's', 'kafka')))
      headers.set(Buffer.from(name), Buffer.from(value));
    headers.set(Buffer.from('traceparent'), Buffer.from('second'));
    expect(recordHeaders({ headers })['traceparent']).toBe('second');
    headers.set(Buffer.from('ce_aggregateid'), Buffer.from('B'));
    expect(() => recordHeaders({ headers })).toThrow(/headers\.ce_aggregateid: appears twice/);
  });
});
