import { describe, expect, it } from 'vitest';
import { aggregateKey, aggregateKeyOf } from '../../src/aggregate-key.js';
import { toMessage } from '../../src/core/event-row.js';
import type { ClaimRow } from '../../src/relay/claim/claim-row.js';

const row = (extra: Partial<ClaimRow> = {}): ClaimRow => ({
  delivered: '3',
  previous_id: null,
  waits: false,
  id: '17',
  event_id: '0190f5a4-8d3c-7bbb-9b1e-000000000017',
  partition: 3,
  aggregate_type: 'order',
  aggregate_id: 'o-9',
  sequence: '4',
  event_type: 'order.shipped',
  schema_version: 2,
  topic: 'orders',
  payload: '{"a":1}',
  payload_bytes: null,
  headers: '{"traceparent":"00-abc-def-01"}',
  created_at: new Date(1_700_000_000_000),
  deliver_after: null,
  attempts: 1,
  ...extra,
});

describe('claimed rows as messages', () => {
  it('maps a JSON event', () => {
    const m = toMessage(row());
    expect(m).toEqual({
      id: '17',
      eventId: '0190f5a4-8d3c-7bbb-9b1e-000000000017',
      aggregateType: 'order',
      aggregateId: 'o-9',
      sequence: 4,
      type: 'order.shipped',
      schemaVersion: 2,
      topic: 'orders',
      payload: Buffer.from('{"a":1}'),
      contentType: 'application/json',
      headers: { traceparent: '00-abc-def-01' },
      createdAt: new Date(1_700_000_000_000),
      attempts: 1,
    });
  });

  it('maps a binary event, and a JSON null', () => {
    const bytes = Buffer.from([0, 1, 2]);
    const binary = toMessage(row({ payload: null, payload_bytes: bytes }));
    expect(binary.payload).toBe(bytes);
    expect(binary.contentType).toBe('application/octet-stream');
    expect(toMessage(row({ payload: null })).payload).toEqual(Buffer.from('null'));
  });
});

describe('claimed rows as messages, every shape', () => {
  it('keeps one key order, sequence base and deliverAfter in their places when present', () => {
    const order = [
      'id',
      'eventId',
      'aggregateType',
      'aggregateId',
      'sequence',
      'type',
      'schemaVersion',
      'topic',
      'payload',
      'contentType',
      'headers',
      'createdAt',
      'attempts',
    ];
    expect(Object.keys(toMessage(row({ sequence_base: '0' })))).toEqual(order);
    expect(Object.keys(toMessage(row({ sequence_base: undefined })))).toEqual(order);
    const later = new Date(1_800_000_000_000);
    const full = toMessage(row({ sequence_base: '7', deliver_after: later, headers: '{}' }));
    expect(Object.keys(full)).toEqual([
      ...order.slice(0, 5),
      'sequenceBase',
      ...order.slice(5, 12),
      'deliverAfter',
      'attempts',
    ]);
    expect(full).toMatchObject({ sequenceBase: 7, deliverAfter: later, headers: {} });
  });

  it('gives every message its own headers object, empty or not', () => {
    const a = toMessage(row({ headers: '{}' }));
    const b = toMessage(row({ headers: '{}' }));
    expect(a.headers).toEqual({});
    expect(a.headers).not.toBe(b.headers);
    expect(toMessage(row({ headers: '{"x":"1"}' })).headers).toEqual({ x: '1' });
  });
});

describe('aggregate key', () => {
  it('is the same for a message and for its row', () => {
    const r = row();
    expect(aggregateKey(toMessage(r))).toBe(aggregateKeyOf(r.aggregate_type, r.aggregate_id));
  });

  it('joins type and id with U+001F, as the claim statement does (chr(31))', () => {
    expect(aggregateKeyOf('order', 'o-9')).toBe('order\u001fo-9');
    expect(aggregateKeyOf('ab', 'c')).not.toBe(aggregateKeyOf('a', 'bc'));
  });
});
