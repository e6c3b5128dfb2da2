/** The chaos harness's pure parts: a seed reproduces the schedule; latency windows and recovery times. */
import { describe, expect, it } from 'vitest';
import { producerVia } from '../../chaos/cdc.js';
import { latencies, recoveryTimes } from '../../chaos/metrics.js';
import { seededRandom } from '../../chaos/prng.js';
import { PROFILES } from '../../chaos/profiles.js';
import {
  ALL_FAULT_KINDS,
  CDC_FAULT_KINDS,
  CDC_SILENCE_TIMEOUT_S,
  FAULT_KINDS,
  faultSchedule,
  QUIET_SECONDS,
} from '../../chaos/schedule.js';

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

describe('faultSchedule for the CDC relay', () => {
  const cdcLinks = [...links, 'relay-1>repl', 'relay-2>repl'];

  it('leaves the polling schedule of a seed as it was (the long runs in docs/reliability.md)', () => {
    const long = ['producer-1', 'producer-2', 'producer-3', 'relay-1', 'relay-2', 'relay-3'];
    const all = [...long, 'consumer-1', 'consumer-2'];
    const longLinks = [...all.map((c) => `${c}>pg`), ...all.slice(3).map((c) => `${c}>nats`)];
    const head = faultSchedule(seededRandom(101), PROFILES.long, all, longLinks).slice(0, 3);
    expect(head.map((f) => [f.atS, f.kind, f.target])).toEqual([
      [2.9, 'kill', 'relay-1'],
      [7.2, 'broker-restart', 'broker'],
      [13.5, 'pg-restart-fast', 'postgres'],
    ]);
    expect(faultSchedule(seededRandom(101), PROFILES.long, all, longLinks, 'poll')).toEqual(
      faultSchedule(seededRandom(101), PROFILES.long, all, longLinks),
    );
  });

  it('opens with a quiet period and a stall past the silence timeout, and has every kind', () => {
    for (const seed of [1, 2, 3]) {
      const schedule = faultSchedule(seededRandom(seed), PROFILES.short, components, cdcLinks, 'cdc');
      expect(schedule).toHaveLength(PROFILES.short.faults);
      expect(new Set(schedule.map((f) => f.kind))).toEqual(new Set(ALL_FAULT_KINDS));
      expect(schedule[0]).toMatchObject({ kind: 'quiet', target: 'producers', durationS: QUIET_SECONDS });
      expect(schedule[1]).toMatchObject({ kind: 'repl-stall', target: 'streamer>repl' });
      expect(schedule[1]!.durationS).toBeGreaterThan(CDC_SILENCE_TIMEOUT_S);
      expect(Math.max(...schedule.map((f) => f.atS))).toBeLessThan(PROFILES.short.cdcFaultPhaseSeconds);
      for (const f of schedule) {
        if (f.kind === 'takeover') expect(f.target).toBe('streamer');
        if (f.kind === 'repl-reset') expect(f.target).toBe('streamer>repl');
        if (f.kind.startsWith('tcp-')) expect(cdcLinks).toContain(f.target);
      }
    }
  });

  it('draws the CDC kinds again in the long profile', () => {
    const schedule = faultSchedule(seededRandom(302), PROFILES.long, components, cdcLinks, 'cdc');
    for (const kind of CDC_FAULT_KINDS)
      expect(schedule.filter((f) => f.kind === kind).length).toBeGreaterThan(1);
  });

  it('mixed producers alternate table and WAL mode', () => {
    expect([0, 1, 2].map((i) => producerVia('mixed', i))).toEqual(['table', 'wal', 'table']);
    expect(producerVia('wal', 0)).toBe('wal');
    expect(producerVia('table', 1)).toBe('table');
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
