import { describe, expect, it } from 'vitest';
import { fullJitterDelay, loopErrorDelay, outageDelay } from '../../src/relay/backoff.js';
import { fairShare } from '../../src/relay/leases.js';

describe('full jitter backoff', () => {
  const policy = { baseMs: 100, capMs: 10_000 };
  it('draws from [0, base * 2^(n-1)]', () => {
    expect(fullJitterDelay(policy, 1, () => 0.999999)).toBe(99);
    expect(fullJitterDelay(policy, 3, () => 0.5)).toBe(200);
    expect(fullJitterDelay(policy, 3, () => 0)).toBe(0);
  });
  it('never exceeds the cap, even for huge attempt counts', () => {
    expect(fullJitterDelay(policy, 40, () => 0.999999)).toBe(9999);
    expect(fullJitterDelay(policy, 10_000, () => 0.999999)).toBe(9999);
  });
  it('spreads retries (jitter)', () => {
    const draws = new Set(Array.from({ length: 50 }, () => fullJitterDelay(policy, 5)));
    expect(draws.size).toBeGreaterThan(10);
  });
});

describe("the relay's own backoffs", () => {
  it('after a loop error: 100 ms plus full jitter from 200 ms up to 10 s', () => {
    expect(loopErrorDelay(1, () => 0)).toBe(100);
    expect(loopErrorDelay(1, () => 0.999999)).toBe(299);
    expect(loopErrorDelay(3, () => 0.5)).toBe(500);
    expect(loopErrorDelay(1000, () => 0.999999)).toBe(10_099);
  });
  it('in a broker outage: 50 ms plus full jitter from 200 ms up to 5 s', () => {
    expect(outageDelay(1, () => 0)).toBe(50);
    expect(outageDelay(2, () => 0.5)).toBe(250);
    expect(outageDelay(1000, () => 0.999999)).toBe(5049);
  });
});

describe('fair share of partitions', () => {
  it('splits evenly and hands the remainder to the first ranks', () => {
    expect([0, 1, 2].map((r) => fairShare(16, 3, r))).toEqual([6, 5, 5]);
    expect(fairShare(16, 1, 0)).toBe(16);
    expect([0, 1, 2, 3, 4].map((r) => fairShare(4, 5, r))).toEqual([1, 1, 1, 1, 0]);
  });
  it('sums to the partition count', () => {
    for (let n = 1; n < 40; n++) {
      let sum = 0;
      for (let r = 0; r < n; r++) sum += fairShare(16, n, r);
      expect(sum).toBe(16);
    }
  });
});
