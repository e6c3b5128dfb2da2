import { afterEach, describe, expect, it, vi } from 'vitest';
import { silentLogger } from '../../src/logger.js';
import { LeaseKeeper, leaseRoundMs } from '../../src/relay/lease-keeper.js';
import { FAST_POLL_MS, GRACE_MS, IdleCadence, SETTLE_MS } from '../../src/relay/polling/idle.js';

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
    acquisitions: 0,
    setSleeping: async (sleeping: boolean) => {
      steps.push(`sleeping ${sleeping}`);
    },
  };
  const idle = new IdleCadence(doorbell, flag, listen, pollIntervalMs, () => now);
  return { idle, steps, flag };
}

describe('IdleCadence', () => {
  it('polls fast for SETTLE_MS, flags the partitions sleeping, looks again after GRACE_MS, then sleeps', async () => {
    const { idle, steps } = setup(true);
    while (!steps.includes('sleeping true')) await idle.rest();
    const fast = steps.slice(0, -1);
    expect(fast.every((s) => s === `sleep ${FAST_POLL_MS}`)).toBe(true);
    expect(fast.map((s) => Number(s.slice(6))).reduce((a, b) => a + b)).toBeGreaterThanOrEqual(SETTLE_MS);
    steps.length = 0;
    await idle.rest();
    expect(steps).toEqual([`sleep ${GRACE_MS}`]);
    await idle.rest();
    await idle.rest();
    // asleep: one look per poll interval, and no statement but that look's claim
    expect(steps.slice(1)).toEqual(['sleep 1000', 'sleep 1000']);
  });

  it('writes the flag again only for partitions acquired since it was set, then looks again after GRACE_MS', async () => {
    const { idle, steps, flag } = setup(true);
    while (!steps.includes('sleeping true')) await idle.rest();
    await idle.rest();
    steps.length = 0;
    flag.acquisitions += 1;
    await idle.rest();
    await idle.rest();
    await idle.rest();
    expect(steps).toEqual(['sleeping true', `sleep ${GRACE_MS}`, 'sleep 1000']);
  });

  it('without LISTEN goes from fast polling straight to the poll interval, flag untouched', async () => {
    const { idle, steps } = setup(false, 250);
    for (let i = 0; i < 60; i++) await idle.rest();
    expect(steps).not.toContain('sleeping true');
    expect(steps.at(-1)).toBe('sleep 250');
    expect(steps).not.toContain(`sleep ${GRACE_MS}`);
  });

  it('wakes up: clears the flag if it was set, and polls fast again', async () => {
    const { idle, steps } = setup(true);
    idle.awake();
    expect(steps).toEqual([]); // not flagged: no statement
    while (!steps.includes('sleeping true')) await idle.rest();
    steps.length = 0;
    idle.awake();
    expect(steps).toEqual(['sleeping false']);
    await idle.rest();
    expect(steps).toEqual(['sleeping false', 'sleep 1']);
  });
});

describe('LeaseKeeper', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  function keeper(leaseMs: number, rebalance = true) {
    const calls: string[] = [];
    let short = false;
    let blocked: Promise<void> | undefined;
    const leases = {
      renew: async () => {
        calls.push('renew');
      },
      rebalance: async () => {
        calls.push('rebalance');
        await blocked;
        return short;
      },
    };
    const k = new LeaseKeeper({
      leases,
      leaseMs,
      rebalance,
      renewed: async () => undefined,
      logger: silentLogger,
      relayId: 'r',
    });
    return {
      k,
      calls,
      short: (v: boolean) => {
        short = v;
      },
      block: (p: Promise<void> | undefined) => {
        blocked = p;
      },
    };
  }

  it('rounds every third of the lease, at least every 100 ms', () => {
    expect(leaseRoundMs(15_000)).toBe(5000);
    expect(leaseRoundMs(300)).toBe(100);
    expect(leaseRoundMs(1000)).toBe(333);
  });

  it('renews then rebalances at once, then every interval; within 500 ms while short of the share', async () => {
    vi.useFakeTimers();
    const { k, calls, short } = keeper(15_000);
    k.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(calls).toEqual(['renew', 'rebalance']);
    await vi.advanceTimersByTimeAsync(4999);
    expect(calls).toHaveLength(2);
    short(true);
    await vi.advanceTimersByTimeAsync(1);
    expect(calls).toHaveLength(4);
    await vi.advanceTimersByTimeAsync(500);
    expect(calls).toHaveLength(6);
    short(false);
    await vi.advanceTimersByTimeAsync(500);
    expect(calls).toHaveLength(8);
    await vi.advanceTimersByTimeAsync(4999);
    expect(calls).toHaveLength(8);
    k.stop();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(calls).toHaveLength(8);
  });

  it('a rebalance still under way never holds the next renewal up (and is not started twice)', async () => {
    vi.useFakeTimers();
    const { k, calls, block } = keeper(3000);
    let unblock!: () => void;
    block(
      new Promise<void>((resolve) => {
        unblock = resolve;
      }),
    );
    k.start();
    await vi.advanceTimersByTimeAsync(3000);
    expect(calls).toEqual(['renew', 'rebalance', 'renew', 'renew', 'renew']);
    unblock();
    block(undefined);
    await vi.advanceTimersByTimeAsync(1000);
    expect(calls.slice(5)).toEqual(['renew', 'rebalance']);
    k.stop();
  });

  it('renews only when the source rebalances itself (the CDC relay)', async () => {
    vi.useFakeTimers();
    const { k, calls } = keeper(3000, false);
    k.start();
    await vi.advanceTimersByTimeAsync(1000);
    expect(calls).toEqual(['renew', 'renew']);
    k.stop();
  });
});
