/** Where the claim's scan starts (src/relay/scan-floor.ts), on a clock of the test's own. */
import { describe, expect, it } from 'vitest';
import { ScanFloor } from '../../src/relay/polling/scan-floor.js';

function floorAt(fullEveryMs = 1_000, trailMs = 2_000) {
  const clock = { now: 0 };
  const floor = new ScanFloor({ fullEveryMs, trailMs, now: () => clock.now });
  return { floor, clock };
}

describe('the scan floor', () => {
  it('starts with a full scan, then at the first id of the claims within the trail, and the last before it', () => {
    const { floor, clock } = floorAt();
    const first = floor.start([0, 1]);
    expect(first).toEqual({ from: '0', full: true });
    floor.claimed(first, '100', 1);
    clock.now = 10;
    // The first rows since the start: the floor stays at the beginning for the trail.
    expect(floor.start([0, 1])).toEqual({ from: '0', full: false });
    floor.claimed(floor.start([0, 1]), '100', 1);
    const second = floor.start([0, 1]);
    floor.claimed(second, '1100', 1);
    clock.now = 2_500;
    // A full scan (a period passed); the claim at 10 is now the last one older than the trail.
    const full = floor.start([0, 1]);
    expect(full.full).toBe(true);
    floor.claimed(full, '2100', 1);
    expect(floor.start([0, 1]).from).toBe('1100');
    clock.now = 2_600;
    expect(floor.start([0, 1]).from).toBe('1100');
    clock.now = 4_600;
    // A full scan is due again (it starts at the beginning, whatever the floor).
    expect(floor.start([0, 1])).toEqual({ from: '0', full: true });
  });

  it('never rises above a lower first id seen within the trail (a late commit, a hold released)', () => {
    const { floor, clock } = floorAt(60_000);
    floor.claimed(floor.start([0]), '500', 1);
    clock.now = 100;
    floor.claimed(floor.start([0]), '900', 1);
    clock.now = 200;
    floor.claimed(floor.start([0]), '450', 1);
    clock.now = 3_000;
    floor.claimed(floor.start([0]), '1000', 1);
    // 500 and 900 are past the trail, 450 is the last claim before it.
    expect(floor.start([0]).from).toBe('450');
  });

  it('a claim that returns nothing leaves the floor where it is', () => {
    const { floor, clock } = floorAt(60_000);
    floor.claimed(floor.start([0]), '600', 1);
    floor.claimed(floor.start([0]), '700', 1);
    for (let t = 1; t < 10; t++) {
      clock.now = t * 1_000;
      floor.claimed(floor.start([0]), undefined, 1);
    }
    expect(floor.start([0])).toEqual({ from: '700', full: false });
  });

  it('scans in full every period, stretched to 50 full scans when the last three were slow, at most 10 periods', () => {
    const { floor, clock } = floorAt(1_000);
    // Two slow full scans stretch nothing yet (a busy machine slows one or two).
    floor.claimed(floor.start([0]), '10', 40);
    clock.now = 1_000;
    floor.claimed(floor.start([0]), '10', 900);
    clock.now = 2_000;
    expect(floor.start([0]).full).toBe(true);
    floor.claimed(floor.start([0]), '10', 40);
    // The quickest of the last three: 50 × 40 ms = 2 s, no full scan yet.
    clock.now = 3_500;
    expect(floor.start([0]).full).toBe(false);
    clock.now = 4_000;
    const full = floor.start([0]);
    expect(full.full).toBe(true);
    floor.claimed(full, '10', 900);
    clock.now = 6_000;
    floor.claimed(floor.start([0]), '10', 900);
    // 900, 40, 900… then 900, 900, 900: 45 s, at most 10 periods.
    clock.now = 8_000;
    floor.claimed(floor.start([0]), '10', 900);
    clock.now = 8_000 + 9_999;
    expect(floor.start([0]).full).toBe(false);
    clock.now = 8_000 + 10_000;
    expect(floor.start([0]).full).toBe(true);
  });

  it('one slow full scan among quick ones does not stretch the period', () => {
    const { floor, clock } = floorAt(1_000);
    for (const [at, ms] of [
      [0, 2],
      [1_000, 2],
      [2_000, 2],
      [3_000, 400],
    ] as const) {
      clock.now = at;
      const start = floor.start([0]);
      expect(start.full).toBe(true);
      floor.claimed(start, '10', ms);
    }
    clock.now = 4_000;
    expect(floor.start([0]).full).toBe(true);
  });

  it('after a start or a reset, the first rows keep the floor at the beginning for the trail (events drawn before them commit later)', () => {
    const { floor, clock } = floorAt(60_000);
    floor.claimed(floor.start([0]), undefined, 1);
    clock.now = 100;
    // Ids 1 and 2 are drawn, 3 commits first: the claim sees 3.
    floor.claimed(floor.start([0]), '3', 1);
    clock.now = 200;
    expect(floor.start([0]).from).toBe('0');
    floor.claimed(floor.start([0]), '4', 1);
    clock.now = 2_300;
    floor.claimed(floor.start([0]), '9', 1);
    // The trail passed: the floor is the claims' again.
    expect(floor.start([0]).from).toBe('4');
    floor.reset();
    floor.claimed(floor.start([0]), '20', 1);
    expect(floor.start([0]).from).toBe('0');
  });

  it('starts over when the partitions held change, or after a reset', () => {
    const { floor, clock } = floorAt(60_000);
    floor.claimed(floor.start([0]), '700', 1);
    clock.now = 10;
    expect(floor.start([0]).full).toBe(false);
    expect(floor.start([0, 1]).full).toBe(true);
    floor.claimed(floor.start([0, 1]), '800', 1);
    expect(floor.start([0, 1]).full).toBe(false);
    floor.reset();
    expect(floor.start([0, 1]).full).toBe(true);
  });

  it('keeps ids beyond 2^53 exact', () => {
    const { floor, clock } = floorAt(60_000);
    floor.claimed(floor.start([0]), '9007199254740990', 1);
    clock.now = 3_000;
    floor.claimed(floor.start([0]), '9007199254740993', 1);
    clock.now = 6_000;
    expect(floor.start([0]).from).toBe('9007199254740993');
  });
});
