import { describe, expect, it } from 'vitest';
import { isStructured, readStructured } from '../../src/consumers/mqtt-structured.js';
import { fromEnvelope } from '../../src/inbox/message.js';
import { structuredPayload } from '../../src/publishers/mqtt/wire.js';
import { AWKWARD_IDS } from '../../src/testing/index.js';
import { makeMessage } from '../helpers/messages.js';

function read(json: string): { headers: Record<string, string>; payload: string } {
  const event = readStructured(Buffer.from(json));
  return { headers: event.headers, payload: Buffer.from(event.payload).toString('utf8') };
}

describe('MQTT structured mode (binding §3.2) read back', () => {
  it('refuses an event carrying an attribute member twice (JSON.parse would keep the last), naming it', () => {
    const id = '0190a0c2-5f0e-7c4e-8a7f-1234567890ab';
    const event = (extra: string) =>
      `{"specversion":"1.0","id":"${id}","type":"order.placed",${extra}"aggregatetype":"order","aggregateid":"o-1","sequence":"1","schemaversion":"1","data":{"n":1}}`;
    expect(() => readStructured(Buffer.from(event('"type":"order.cancelled",')))).toThrow(
      /^headers\.type: appears twice in the event/,
    );
    expect(() => readStructured(Buffer.from(event(' "id" : "other", ')))).toThrow(
      /^headers\.id: appears twice in the event/,
    );
    // Members inside data, and a repeated member that is no attribute name, are the data's own business.
    expect(read(event('"x-y":1,"x-y":2,')).headers['type']).toBe('order.placed');
    expect(read(`{"id":"${id}","type":"t","data":{"type":"a","type":"b"}}`).payload).toBe(
      '{"type":"a","type":"b"}',
    );
  });

  it('is said by the Content Type, or implied by a PUBLISH without properties (MQTT 3.1.1)', () => {
    expect(isStructured('application/cloudevents+json', true)).toBe(true);
    expect(isStructured('Application/CloudEvents+JSON; charset=utf-8', false)).toBe(true);
    expect(isStructured('application/json', false)).toBe(false);
    expect(isStructured(undefined, true)).toBe(false);
    expect(isStructured(undefined, false)).toBe(true);
  });

  it('what mqttPublisher sends over MQTT 3.1.1 reads back exactly: every attribute, the payload bytes', () => {
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    for (const [i, aggregateId] of AWKWARD_IDS.entries()) {
      const json = makeMessage({
        aggregateId,
        sequence: 9 + i,
        type: `t/"v2"%41~${i}`,
        headers: { traceparent },
        // As PostgreSQL's jsonb gives it back: spaces inside, none around.
        payload: Buffer.from('{"a": [1, "}\\"{", 2.50], "é": null, "s": "😀\\u0000"}'),
      });
      const bytes = makeMessage({
        aggregateId,
        payload: new Uint8Array([0, 255, 7]),
        contentType: 'application/octet-stream',
      });
      for (const sent of [json, bytes]) {
        const wire = structuredPayload(sent, 'urn:example:orders') as Buffer;
        const { headers, payload } = readStructured(wire);
        const got = fromEnvelope(headers, payload);
        expect(got).toMatchObject({
          eventId: sent.eventId,
          type: sent.type,
          aggregateType: sent.aggregateType,
          aggregateId,
          sequence: sent.sequence,
          schemaVersion: sent.schemaVersion,
          contentType: sent.contentType,
        });
        expect(Buffer.from(got.payload).equals(Buffer.from(sent.payload))).toBe(true);
        expect(got.headers['ce-source']).toBe('urn:example:orders');
      }
      expect(
        fromEnvelope(readStructured(structuredPayload(json, 'x') as Buffer).headers, new Uint8Array())
          .headers,
      ).toMatchObject({ traceparent });
    }
  });

  it('reads attribute names only: a ce-id or AGGREGATEID member does not override the event', () => {
    const sent = makeMessage({ aggregateId: 'A', sequence: 1 });
    const doc = JSON.parse((structuredPayload(sent, 'urn:x') as Buffer).toString('utf8'));
    const forged = {
      ...doc,
      'ce-id': '0190a0c2-5f0e-7c4e-8a7f-1234567890ab',
      'ce-aggregateid': 'B',
      AGGREGATEID: 'C',
    };
    const read = fromEnvelope(readStructured(Buffer.from(JSON.stringify(forged))).headers, Buffer.alloc(0));
    expect(read).toMatchObject({ eventId: sent.eventId, aggregateId: 'A', sequence: 1 });
  });

  it("0.1's MQTT 3.1.1 document (plain sequence, no aggregatesequence)", () => {
    const id = '0190c2a4-7a4b-7cc0-9e4a-8d0c6f1e2a3b';
    const wire = `{"traceparent":"00-x","specversion":"1.0","id":"${id}","type":"order.created","source":"tx-outbox","time":"2026-12-01T10:11:12.000Z","subject":"o-1","datacontenttype":"application/json","aggregatetype":"order","aggregateid":"o-1","sequence":"12","schemaversion":"2","data":{"n":1}}`;
    const { headers, payload } = readStructured(Buffer.from(wire));
    expect(fromEnvelope(headers, payload)).toMatchObject({
      eventId: id,
      aggregateId: 'o-1',
      sequence: 12,
      schemaVersion: 2,
      contentType: 'application/json',
      payload: Buffer.from('{"n":1}'),
    });
  });

  it("another producer's document: data anywhere (the last one), JSON numbers and booleans, text data, no data", () => {
    expect(
      read('{ "data" : [ {"x":"]"} ] , "id":"a", "sequence": 3, "flag": true, "n": null, "o": {} }'),
    ).toEqual({
      headers: { id: 'a', sequence: '3', flag: 'true' },
      payload: '[ {"x":"]"} ]',
    });
    expect(read('{"data":1,"data":"two\\n"}').payload).toBe('"two\\n"');
    expect(read('{"datacontenttype":"application/vnd.x+json; v=1","data":{"a":1}}').payload).toBe('{"a":1}');
    expect(read('{"datacontenttype":"text/plain","data":"héllo \\"x\\""}').payload).toBe('héllo "x"');
    expect(read('{"datacontenttype":"text/plain","data_base64":"AP8="}').payload).toBe(
      Buffer.from([0, 255]).toString('utf8'),
    );
    expect(read('{"id":"a"}').payload).toBe('');
  });

  it('refuses what is not a JSON object, saying why', () => {
    expect(() => readStructured(Buffer.from('{nope'))).toThrow(/not a CloudEvents JSON event/);
    expect(() => readStructured(Buffer.from('[1]'))).toThrow(/not a JSON object/);
    expect(() => readStructured(Buffer.from([0x7b, 0xff, 0x7d]))).toThrow(/not a CloudEvents JSON event/);
  });
});
