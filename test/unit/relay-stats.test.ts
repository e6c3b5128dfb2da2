import { describe, expect, it } from 'vitest';
import { RelayCounters, Stopwatch } from '../../src/relay/stats.js';

describe('relay stats', () => {
  it('a stopwatch keeps the mean and the max', () => {
    const watch = new Stopwatch();
    expect(watch.get()).toMatchObject({ mean: 0, max: 0 });
    watch.add(10);
    watch.add(30);
    watch.add(5);
    expect(watch.get()).toMatchObject({ mean: 15, max: 30 });
  });

  it('counts recorded batches, published, retried and dead events', () => {
    const counters = new RelayCounters();
    counters.recorded(7, [{ status: 'pending' }, { status: 'dead' }, { status: 'pending' }]);
    counters.recorded(3, []);
    counters.counts.unavailable += 4;
    counters.lastError = 'boom';
    counters.watches.claim.add(2);
    expect(counters.snapshot([0, 3])).toEqual({
      published: 10,
      retried: 2,
      dead: 1,
      gapsBridged: 0,
      unavailable: 4,
      batches: 2,
      partitions: [0, 3],
      lastError: 'boom',
      timings: {
        claim: { mean: 2, max: 2, p50: 2, p99: 2 },
        publish: { mean: 0, max: 0, p50: 0, p99: 0 },
        record: { mean: 0, max: 0, p50: 0, p99: 0 },
      },
    });
  });

  it('counts repeats made dead and gaps bridged, outside any recorded batch', () => {
    const counters = new RelayCounters();
    counters.repeatsDead(2);
    counters.repeatsDead(0);
    counters.gapsBridged(3);
    expect(counters.snapshot([])).toMatchObject({ dead: 2, gapsBridged: 3, batches: 0, retried: 0 });
  });

  it('a snapshot is a copy', () => {
    const counters = new RelayCounters();
    const before = counters.snapshot([]);
    counters.recorded(1, []);
    expect(before.published).toBe(0);
    expect(counters.snapshot([]).published).toBe(1);
  });

  it('gives the median and 99th percentile of the times, within 5 %', () => {
    const watch = new Stopwatch();
    for (let i = 1; i <= 1000; i++) watch.add(i / 10);
    const t = watch.get();
    expect(t.p50).toBeGreaterThanOrEqual(50);
    expect(t.p50).toBeLessThanOrEqual(50 * 1.05);
    expect(t.p99).toBeGreaterThanOrEqual(99);
    expect(t.p99).toBeLessThanOrEqual(99 * 1.05);
    expect(t.max).toBe(100);
    expect(new Stopwatch().get()).toEqual({ mean: 0, max: 0, p50: 0, p99: 0 });
  });
});
