import { describe, expect, it } from 'vitest';
import { Verifier } from '../../src/cli/demo/verifier.js';
import { envelopeHeaders } from '../../src/envelope/bindings.js';
import { previousEnvelopeHeaders } from '../../src/testing/envelopes.js';
import { makeMessage } from '../helpers/messages.js';

/** What the demo's sinks hand the verifier: a header getter (NATS: names as sent; HTTP: lower case). */
const getter = (headers: Record<string, string>) => (name: string) => headers[name];

describe('the demo verifier', () => {
  it('reads the aggregate id and sequence as enqueued from the NATS and HTTP bindings and from 0.1', () => {
    const verifier = new Verifier();
    const id = ' order 1/é';
    const [first, second, third] = [1, 2, 4].map((sequence) => makeMessage({ aggregateId: id, sequence }));
    expect(verifier.recordEnvelope(getter(envelopeHeaders(first!, 'tx-outbox', 'nats')))).toBe(true);
    expect(verifier.recordEnvelope(getter(envelopeHeaders(second!, 'tx-outbox', 'http')))).toBe(true);
    expect(verifier.recordEnvelope(getter(envelopeHeaders(third!, 'tx-outbox', 'nats')))).toBe(true);
    expect(verifier.aggregates).toBe(1);
    expect(verifier.violations).toEqual([`${id}: got 4 after 2`]);
    const old = makeMessage({ aggregateId: 'plain-1', sequence: 1 });
    expect(verifier.recordEnvelope(getter(previousEnvelopeHeaders(old, 'tx-outbox')))).toBe(true);
    expect(verifier.received).toEqual(new Set([first, second, third, old].map((m) => m!.eventId)));
  });

  it('rejects a message without a valid envelope', () => {
    const verifier = new Verifier();
    const headers = envelopeHeaders(makeMessage(), 'tx-outbox', 'nats');
    expect(verifier.recordEnvelope(getter({ ...headers, 'ce-id': 'not-a-uuid' }))).toBe(false);
    expect(verifier.recordEnvelope(getter({ 'x-foo': 'bar' }))).toBe(false);
    expect(verifier.rejected).toBe(2);
    expect(verifier.received.size).toBe(0);
  });
});
