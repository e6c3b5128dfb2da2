import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { readBatch } from '../../src/consumers/webhook-batch.js';
import type { OutboxMessage } from '../../src/publishers/contract.js';
import { structuredEvent } from '../../src/publishers/webhook/request.js';

function message(headers: Record<string, string>): OutboxMessage {
  return {
    id: '1',
    eventId: randomUUID(),
    aggregateType: 'order',
    aggregateId: ' café ',
    sequence: 7,
    type: 'order.created',
    schemaVersion: 1,
    topic: null,
    payload: Buffer.from('{"a":1}'),
    contentType: 'application/json',
    headers,
    createdAt: new Date(),
    attempts: 0,
  };
}

describe('webhook batches carry every header', () => {
  it('headers that are not attribute names travel in txoheaders and come back with their names as sent', () => {
    const headers = { traceparent: 't', 'x-tenant': 'acme', TraceState: 'a=1', 'X-Note': 'a "b" %41' };
    const sent = [message(headers), message({ 'x-only': '1' })];
    const body = Buffer.from(JSON.stringify(sent.map((m) => structuredEvent(m, 'urn:x'))));
    const [first, second] = readBatch(body);
    expect(first!.aggregateId).toBe(' café ');
    expect(first!.headers).toMatchObject(headers);
    expect(first!.headers).not.toHaveProperty('txoheaders');
    expect(second!.headers).toMatchObject({ 'x-only': '1' });
  });
});
