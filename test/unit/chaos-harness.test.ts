/** The chaos harness's pure parts: a seed reproduces the schedule; latency windows and recovery times. */
import { describe, expect, it } from 'vitest';
import { latencies, recoveryTimes } from '../../chaos/metrics.js';
import { seededRandom } from '../../chaos/prng.js';
import { PROFILES } from '../../chaos/profiles.js';
import { FAULT_KINDS, faultSchedule } from '../../chaos/schedule.js';

const components = ['producer-1', 'relay-1', 'relay-2', 'consumer-1'];
const links = components.map((c) => `${c}>pg`);

describe('faultSchedule', () => {
  it('is the same for the same seed, and another for another seed', () => {
    const a = faultSchedule(seededRandom(42), PROFILES.short, components, links);
    const b = faultSchedule(seededRandom(42), PROFILES.short, components, links);
    const c = faultSchedule(seededRandom(43), PROFILES.short, components, links);
    expect(a).toEqual(b);
    expect(a).not.toEqual(c);
  });

  it('has every kind of fault, in time order, within the fault phase, with bounded durations', () => {
    for (const profile of [PROFILES.short, PROFILES.long]) {
      const schedule = faultSchedule(seededRandom(7), profile, components, links);
      expect(schedule).toHaveLength(profile.faults);
      expect(new Set(schedule.map((f) => f.kind))).toEqual(new Set(FAULT_KINDS));
      const times = schedule.map((f) => f.atS);
      expect(times).toEqual([...times].sort((x, y) => x - y));
      expect(Math.max(...times)).toBeLessThan(profile.faultPhaseSeconds);
      for (const f of schedule) {
        if (f.kind === 'stop') expect(f.durationS).toBeLessThanOrEqual(profile.maxStopSeconds);
        if (f.kind === 'tcp-stall') expect(f.durationS).toBeLessThanOrEqual(profile.maxStallSeconds);
        if (f.kind.startsWith('tcp-')) expect(links).toContain(f.target);
        if (f.kind === 'kill' || f.kind === 'stop') expect(components).toContain(f.target);
      }
    }
  });
});

describe('metrics', () => {
  // [committed_at, applied_at] in ms, ordered by commit
  const rows = [
    [0, 10],
    [100, 110],
    [200, 5_000], // committed just before a fault ended, applied late
    [300, 5_010],
    [6_000, 6_010],
  ] as const;

  it('recovery: from a fault end until everything committed before it was applied', () => {
    expect(recoveryTimes(rows, [250, 5_500, 50])).toEqual([4_750, 0, 0]);
  });

  it('splits latency between events committed during a fault window and outside', () => {
    const l = latencies(rows, [{ startMs: 150, endMs: 350 }]);
    expect(l.duringFaults.events).toBe(2);
    expect(l.duringFaults.maxMs).toBe(4_800);
    expect(l.outsideFaults.events).toBe(3);
    expect(l.outsideFaults.maxMs).toBe(10);
    expect(l.overall.events).toBe(5);
  });
});
