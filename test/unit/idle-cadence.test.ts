import { describe, expect, it } from 'vitest';
import { GRACE_MS, IdleCadence, SETTLE_MS } from '../../src/relay/polling/idle.js';
import { LeaseSchedule } from '../../src/relay/polling/lease-schedule.js';

function setup(listen: boolean, pollIntervalMs = 1000) {
  let now = 5_000;
  const steps: string[] = [];
  const doorbell = {
    sleep: async (ms: number) => {
      steps.push(`sleep ${ms}`);
      now += ms;
    },
  };
  const flag = {
    setSleeping: async (sleeping: boolean) => {
      steps.push(`sleeping ${sleeping}`);
    },
  };
  const idle = new IdleCadence(doorbell, flag, listen, pollIntervalMs, () => now);
  return { idle, steps };
}

describe('IdleCadence', () => {
  it('polls fast for SETTLE_MS, flags the partitions sleeping, looks again after GRACE_MS, then sleeps', async () => {
    const { idle, steps } = setup(true);
    while (!steps.includes('sleeping true')) await idle.rest(60_000);
    const fast = steps.slice(0, -1);
    expect(fast.slice(0, 3)).toEqual(['sleep 1', 'sleep 2', 'sleep 2']);
    expect(fast.every((s) => s === 'sleep 1' || s === 'sleep 2')).toBe(true);
    expect(fast.map((s) => Number(s.slice(6))).reduce((a, b) => a + b)).toBeGreaterThanOrEqual(SETTLE_MS);
    steps.length = 0;
    await idle.rest(60_000);
    expect(steps).toEqual([`sleep ${GRACE_MS}`]);
    await idle.rest(60_000);
    await idle.rest(60_000);
    // each long sleep re-asserts the flag (partitions may have been acquired meanwhile)
    expect(steps.slice(1)).toEqual(['sleeping true', 'sleep 1000', 'sleeping true', 'sleep 1000']);
  });

  it('never sleeps past the next rebalance', async () => {
    const { idle, steps } = setup(true);
    await idle.rest(0);
    expect(steps).toEqual(['sleep 0']);
  });

  it('without LISTEN goes from fast polling straight to the poll interval, flag untouched', async () => {
    const { idle, steps } = setup(false, 250);
    for (let i = 0; i < 40; i++) await idle.rest(60_000);
    expect(steps).not.toContain('sleeping true');
    expect(steps.at(-1)).toBe('sleep 250');
    expect(steps).not.toContain(`sleep ${GRACE_MS}`);
  });

  it('wakes up: clears the flag if it was set, and polls fast again', async () => {
    const { idle, steps } = setup(true);
    await idle.awake();
    expect(steps).toEqual([]); // not flagged: no statement
    while (!steps.includes('sleeping true')) await idle.rest(60_000);
    steps.length = 0;
    await idle.awake();
    expect(steps).toEqual(['sleeping false']);
    await idle.rest(60_000);
    expect(steps).toEqual(['sleeping false', 'sleep 1']);
  });
});

describe('LeaseSchedule', () => {
  it('renews and rebalances every third of the lease, at least every 100 ms', () => {
    expect(new LeaseSchedule(15_000).everyMs).toBe(5000);
    expect(new LeaseSchedule(300).everyMs).toBe(100);
    expect(new LeaseSchedule(1000).everyMs).toBe(333);
  });

  it('is due at once, then every interval; within 500 ms while short of the share; at once after asap()', () => {
    let now = 1_000;
    const schedule = new LeaseSchedule(15_000, () => now);
    expect(schedule.due).toBe(true);
    expect(schedule.untilDue()).toBe(0);
    schedule.rebalanced(false);
    expect(schedule.due).toBe(false);
    expect(schedule.untilDue()).toBe(5000);
    now += 4999;
    expect(schedule.due).toBe(false);
    now += 1;
    expect(schedule.due).toBe(true);
    schedule.rebalanced(true);
    expect(schedule.untilDue()).toBe(500);
    schedule.asap();
    expect(schedule.due).toBe(true);
    const fast = new LeaseSchedule(600, () => now);
    fast.rebalanced(true);
    expect(fast.untilDue()).toBe(200); // the interval, when shorter than 500 ms
  });
});
