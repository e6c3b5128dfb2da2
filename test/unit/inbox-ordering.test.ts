import pg from 'pg';
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_DEFER_CAP_MS,
  type DeferPolicy,
  deferDelay,
  deferPolicy,
} from '../../src/consumers/defer.js';
import { isTransactionConflict } from '../../src/errors.js';
import {
  DEFAULT_MAX_GAP_MS,
  decideOrder,
  GAP_INTERVAL_CAP_MS,
  type GapBudget,
  gapExhausted,
} from '../../src/inbox/ordering.js';

describe('inbox ordering policies', () => {
  it('strict applies only the next sequence', () => {
    expect(decideOrder('strict', 4, 5)).toBe('apply');
    expect(decideOrder('strict', 4, 7)).toBe('gap');
    expect(decideOrder('strict', 4, 4)).toBe('stale');
    expect(decideOrder('strict', 4, 2)).toBe('stale');
  });
  it('strict starts an unseen aggregate at sequence 1, or at the first delivered with first-seen', () => {
    expect(decideOrder('strict', undefined, 1)).toBe('apply');
    expect(decideOrder('strict', undefined, 2)).toBe('gap');
    expect(decideOrder('strict', undefined, 7, 7)).toBe('apply');
    expect(decideOrder('strict', undefined, 6, 7)).toBe('stale');
    expect(decideOrder('strict', undefined, 9, 'first-seen')).toBe('apply');
    expect(decideOrder('skip-stale', undefined, 9)).toBe('apply');
  });
  it('skip-stale applies anything newer and skips the rest', () => {
    expect(decideOrder('skip-stale', 4, 9)).toBe('apply');
    expect(decideOrder('skip-stale', 4, 4)).toBe('stale');
    expect(decideOrder('skip-stale', undefined, 1)).toBe('apply');
  });
  it('none applies everything', () => {
    expect(decideOrder('none', 9, 1)).toBe('apply');
  });
});

describe('strict gap budget and redelivery backoff', () => {
  /** Deliveries of a deferred event in `ms` of waiting, redelivered with `policy`'s backoff. */
  const deliveriesWithin = (policy: DeferPolicy, ms: number): number => {
    let elapsed = 0;
    let deliveries = 1; // the first one, deferred at once
    while (elapsed + deferDelay(policy, deliveries) <= ms) {
      elapsed += deferDelay(policy, deliveries);
      deliveries += 1;
    }
    return deliveries;
  };
  const defaults: GapBudget = { maxGapMs: DEFAULT_MAX_GAP_MS };

  it('redelivery doubles from deferMs up to deferCapMs (defaults 1 s and 10 s)', () => {
    const policy = deferPolicy({});
    expect(policy).toEqual({ deferMs: 1000, deferCapMs: 10_000 });
    expect([1, 2, 3, 4, 5, 6, 50].map((n) => deferDelay(policy, n))).toEqual([
      1000, 2000, 4000, 8000, 10_000, 10_000, 10_000,
    ]);
    expect(deferDelay(policy, undefined)).toBe(1000);
    // A cap below deferMs is deferMs: never faster than asked.
    expect(deferDelay(deferPolicy({ deferMs: 500, deferCapMs: 100 }), 9)).toBe(500);
  });

  it('the defaults outlast two consumer crashes (NATS ack wait 30 s each) and a 60 s database restart', () => {
    // The successor of an event held by a crashed consumer waits until the broker's ack wait runs
    // out and the event is redelivered: 30 s per crash at the NATS adapter's default; a database
    // restart adds its downtime. 120 s in all, without the aggregate advancing.
    const waitedMs = 2 * 30_000 + 60_000;
    const deliveries = deliveriesWithin(deferPolicy({}), waitedMs);
    expect(deliveries).toBe(15); // the first, 4 after 1+2+4+8 = 15 s, 10 more at the 10 s cap
    expect(gapExhausted(defaults, { waitedMs, deliveries })).toBeUndefined();
    // Even the deprecated count of old (50) is not reached: the backoff makes few round trips.
    expect(gapExhausted({ ...defaults, maxDeferrals: 50 }, { waitedMs, deliveries })).toBeUndefined();
    // Before: one delivery per second, and the budget was 50 deliveries in all.
    expect(waitedMs / 1000).toBeGreaterThan(50);
  });

  it('a real hole is quarantined after maxGapMs (5 min by default), with the reason', () => {
    const deliveries = deliveriesWithin(deferPolicy({}), DEFAULT_MAX_GAP_MS);
    expect(deliveries).toBe(33);
    expect(gapExhausted(defaults, { waitedMs: DEFAULT_MAX_GAP_MS - 1, deliveries })).toBeUndefined();
    expect(gapExhausted(defaults, { waitedMs: DEFAULT_MAX_GAP_MS, deliveries })).toBe(
      'gap not filled for 300 s (33 deliveries) without the aggregate advancing',
    );
    expect(gapExhausted({ maxGapMs: 60_000, maxDeferrals: 3 }, { waitedMs: 10, deliveries: 3 })).toBe(
      'gap not filled after 3 deliveries without the aggregate advancing',
    );
  });
});

describe('what counts as waiting on a gap', () => {
  it("every adapter's default redelivery interval counts in full: a real hole's waiting accrues at real time", () => {
    // NATS, Kafka, MQTT: deferCapMs; Redis: claimIdleMs 30 s; NATS ack wait 30 s (a crashed holder).
    for (const interval of [DEFAULT_DEFER_CAP_MS, 30_000, 30_000])
      expect(interval).toBeLessThanOrEqual(GAP_INTERVAL_CAP_MS);
    // An outage of any length between two deliveries costs the budget at most a minute: four of
    // them in a row still leave the default 5 min unspent.
    expect(4 * GAP_INTERVAL_CAP_MS).toBeLessThan(DEFAULT_MAX_GAP_MS);
  });
});

describe("the inbox's own transaction conflicts (not charged to the handler)", () => {
  const serverError = (code: string) =>
    Object.assign(new pg.DatabaseError('conflict', 0, 'error'), { code, severity: 'ERROR', routine: 'x' });
  it('serialization failure and deadlock from the pg driver are', () => {
    expect(isTransactionConflict(serverError('40001'))).toBe(true);
    expect(isTransactionConflict(serverError('40P01'))).toBe(true);
    // The same shape from another copy of pg.
    const foreign = Object.assign(new Error('deadlock detected'), {
      name: 'error',
      code: '40P01',
      severity: 'ERROR',
      routine: 'DeadLockReport',
    });
    expect(isTransactionConflict(foreign)).toBe(true);
  });
  it("a handler's connection errors, other server errors and look-alikes are not", () => {
    for (const code of ['ECONNREFUSED', 'ETIMEDOUT', 'ECONNRESET', 'ENOTFOUND'])
      expect(isTransactionConflict(Object.assign(new Error(`connect ${code}`), { code }))).toBe(false);
    expect(isTransactionConflict(serverError('23505'))).toBe(false);
    expect(isTransactionConflict(serverError('57P01'))).toBe(false);
    expect(isTransactionConflict(Object.assign(new Error('retry me'), { code: '40001' }))).toBe(false);
    expect(isTransactionConflict(new Error('Connection terminated unexpectedly'))).toBe(false);
    expect(isTransactionConflict({ code: '40001', severity: 'ERROR', routine: 'x' })).toBe(false);
  });
});
