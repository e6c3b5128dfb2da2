import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { type EnvelopeBinding, envelopeHeaders, structuredAttributes } from '../../src/envelope/bindings.js';
import { OutboxValidationError } from '../../src/errors.js';
import { fromEnvelope } from '../../src/inbox/message.js';
import { decideOrder, ORDERING_POLICIES } from '../../src/inbox/ordering.js';
import type { OutboxMessage } from '../../src/publishers/contract.js';

function message(sequence: number, sequenceBase?: number): OutboxMessage {
  return {
    id: '1',
    eventId: randomUUID(),
    aggregateType: 'order',
    aggregateId: 'o-1',
    sequence,
    ...(sequenceBase === undefined ? {} : { sequenceBase }),
    type: 'order.created',
    schemaVersion: 1,
    topic: null,
    payload: Buffer.from('{}'),
    contentType: 'application/json',
    headers: {},
    createdAt: new Date('2026-12-01T10:11:12.345Z'),
    attempts: 0,
  };
}

const BINDINGS: readonly EnvelopeBinding[] = ['http', 'nats', 'kafka', 'amqp', 'mqtt', 'redis'];

describe('sequencebase attribute', () => {
  it('is sent only above 0, on every binding, and read back as sequenceBase', () => {
    for (const binding of BINDINGS) {
      const plain = envelopeHeaders(message(3, 0), 's', binding);
      expect(Object.keys(plain).some((k) => k.toLowerCase().endsWith('sequencebase'))).toBe(false);
      expect(fromEnvelope(plain, Buffer.from('{}')).sequenceBase).toBeUndefined();
      const based = envelopeHeaders(message(1_000_001, 1_000_000), 's', binding);
      const read = fromEnvelope(based, Buffer.from('{}'));
      expect(read.sequence).toBe(1_000_001);
      expect(read.sequenceBase).toBe(1_000_000);
      // The normalised headers read again give the same base (quarantine keeps these headers).
      expect(fromEnvelope(read.headers, Buffer.from('{}')).sequenceBase).toBe(1_000_000);
    }
    expect(structuredAttributes(message(8, 7), 's')['sequencebase']).toBe('7');
  });

  it('refuses a base that is not below the sequence', () => {
    const headers = { ...envelopeHeaders(message(5, 4), 's', 'http'), 'ce-sequencebase': '5' };
    expect(() => fromEnvelope(headers, Buffer.from('{}'))).toThrow(OutboxValidationError);
    expect(() => fromEnvelope({ ...headers, 'ce-sequencebase': 'x' }, Buffer.from('{}'))).toThrow(
      /sequencebase/,
    );
  });
});

describe('ordering with a sequence base', () => {
  it('strict: a re-created aggregate starts at base + 1 after any earlier position', () => {
    expect(decideOrder('strict', undefined, 101, 1, 100)).toBe('apply');
    expect(decideOrder('strict', 7, 101, 1, 100)).toBe('apply');
    expect(decideOrder('strict', 100, 101, 1, 100)).toBe('apply');
    expect(decideOrder('strict', 7, 102, 1, 100)).toBe('gap');
    expect(decideOrder('strict', undefined, 102, 1, 100)).toBe('gap');
    expect(decideOrder('strict', 101, 102, 1, 100)).toBe('apply');
    // An old sequence (a redelivery from before the prune) is never applied again.
    expect(decideOrder('strict', 101, 7, 1, 0)).toBe('stale');
    expect(decideOrder('strict', 101, 101, 1, 100)).toBe('stale');
  });

  it('every policy applies the first new event and never a reused or older sequence', () => {
    for (const policy of ORDERING_POLICIES) {
      expect(decideOrder(policy, 7, 101, 1, 100)).toBe('apply');
      expect(decideOrder(policy, undefined, 101, 1, 100)).toBe('apply');
      if (policy !== 'none') expect(decideOrder(policy, 101, 5, 1, 0)).toBe('stale');
    }
  });
});
