/**
 * The broker check of `/readyz` before the broker ever answered a publish: a relay whose broker
 * was never reachable waits a whole connect timeout on its first publish, and must not be
 * reported as getting through meanwhile (issue 24, item 11).
 */
import { describe, expect, it } from 'vitest';
import { judge } from '../../src/ops/readiness.js';
import { BrokerContact, type RelayHealth } from '../../src/relay/health.js';

const healthy: RelayHealth = {
  relayId: 'r1',
  schema: 'outbox',
  publisher: 'redis',
  running: true,
  partitions: 2,
  brokerUnavailableSince: undefined,
  lastError: undefined,
  loopErrorsInARow: 0,
};
const reachable = { ok: true, detail: 'reachable', unowned: 0, total: 8 };

describe('readiness before the broker answered', () => {
  it('is not ready while the first publish waits for an answer, and never says "get through"', () => {
    const waiting = judge(reachable, {
      ...healthy,
      brokerAnswered: false,
      firstPublishWaitingSince: new Date('2026-01-01T00:00:00Z'),
    });
    expect(waiting.failing).toEqual(['broker']);
    expect(waiting.checks.broker?.detail).toBe(
      'redis: not known yet: the first publish has had no answer since 2026-01-01T00:00:00.000Z',
    );
  });

  it('with nothing published at all (an empty outbox, a standby) nothing waits on the broker: ready, and says so', () => {
    const idle = judge(reachable, { ...healthy, brokerAnswered: false });
    expect(idle.ready).toBe(true);
    expect(idle.checks.broker?.detail).toBe('redis: not known yet: nothing published so far');
  });

  it('once the broker answered, publishes get through; a health source without the fields reads as before', () => {
    expect(judge(reachable, { ...healthy, brokerAnswered: true }).checks.broker?.detail).toBe(
      'redis: publishes get through',
    );
    expect(judge(reachable, healthy).checks.broker?.detail).toBe('redis: publishes get through');
  });

  it('the contact waits from the first call in flight, and counts as answered once the broker answered', () => {
    let now = 1000;
    const contact = new BrokerContact(() => now);
    expect(contact.health()).toEqual({ brokerAnswered: false, firstPublishWaitingSince: undefined });
    contact.calling();
    now = 2000;
    contact.calling();
    contact.called(false);
    expect(contact.health().firstPublishWaitingSince).toEqual(new Date(1000));
    contact.called(false); // refused as unreachable: the outage log tells the rest
    expect(contact.health()).toEqual({ brokerAnswered: false, firstPublishWaitingSince: undefined });
    contact.calling();
    contact.called(true);
    contact.calling();
    expect(contact.health()).toEqual({ brokerAnswered: true, firstPublishWaitingSince: undefined });
  });
});
