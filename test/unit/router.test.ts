import { describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { routerPublisher } from '../../src/publishers/router.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';
import { makeMessage } from '../helpers/messages.js';

const never = new AbortController().signal;

describe('router publisher', () => {
  it('routes by type glob, aggregate type and topic; first match wins; topic rewrite; outcomes in order', async () => {
    const orders = new RecordingPublisher();
    const audit = new RecordingPublisher();
    const rest = new RecordingPublisher();
    const router = routerPublisher({
      routes: [
        { match: { aggregateType: 'audit' }, publisher: audit, topic: 'audit-log' },
        { match: { type: 'order.*' }, publisher: orders },
        { match: { topic: 'billing.*' }, publisher: orders },
      ],
      fallback: rest,
    });
    const batch = [
      makeMessage({ type: 'order.created' }),
      makeMessage({ aggregateType: 'audit', type: 'order.created' }),
      makeMessage({ type: 'user.created' }),
      makeMessage({ type: 'invoice.paid', topic: 'billing.paid' }),
    ];
    const outcomes = await router.publish(batch, never);
    expect(outcomes).toEqual([{ ok: true }, { ok: true }, { ok: true }, { ok: true }]);
    expect(orders.received.map((m) => m.eventId)).toEqual([batch[0]!.eventId, batch[3]!.eventId]);
    expect(audit.received.map((m) => m.topic)).toEqual(['audit-log']);
    expect(rest.received.map((m) => m.type)).toEqual(['user.created']);
  });

  it('without a fallback, an unmatched message fails permanently and names the type', async () => {
    const router = routerPublisher({
      routes: [{ match: { type: 'order.*' }, publisher: new RecordingPublisher() }],
    });
    const [outcome] = await router.publish([makeMessage({ type: 'user.deleted' })], never);
    expect(outcome).toMatchObject({ ok: false, retryable: false });
    expect((outcome as { error: Error }).error.message).toMatch(/no route for event type "user.deleted"/);
  });

  it('a publisher that throws fails only its own messages, as retryable', async () => {
    const broken = new RecordingPublisher();
    broken.publish = async () => {
      throw new Error('boom');
    };
    const ok = new RecordingPublisher();
    const router = routerPublisher({ routes: [{ match: { type: 'a' }, publisher: broken }], fallback: ok });
    const outcomes = await router.publish([makeMessage({ type: 'a' }), makeMessage({ type: 'b' })], never);
    expect(outcomes[0]).toMatchObject({ ok: false, retryable: true });
    expect(outcomes[1]).toEqual({ ok: true });
  });

  it('rejects an empty match, naming the route', () => {
    expect(() => routerPublisher({ routes: [{ match: {}, publisher: new RecordingPublisher() }] })).toThrow(
      OutboxValidationError,
    );
  });
});
