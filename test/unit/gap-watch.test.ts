import { describe, expect, it } from 'vitest';
import { aggregateKeyOf } from '../../src/aggregate-key.js';
import { GapWatch, MAX_HEADS_PER_PROBE } from '../../src/relay/claim/gap-watch.js';
import { repeatReason } from '../../src/relay/claim/sequence-faults.js';

const head = (id: string, partition = 0, rowId = `${id}-row`) => ({
  key: aggregateKeyOf('order', id),
  id: rowId,
  partition,
});

function setup(options: { graceMs?: number; max?: number; forgetMs?: number } = {}) {
  let now = 100_000;
  const watch = new GapWatch({ graceMs: options.graceMs ?? 10_000, now: () => now, ...options });
  return { watch, advance: (ms: number) => (now += ms) };
}

const ids = (due: Map<number, { id: string }[]>) =>
  Object.fromEntries([...due].map(([p, heads]) => [p, heads.map((h) => h.id)]));

describe('GapWatch', () => {
  it('nothing held: nothing to probe', () => {
    const { watch, advance } = setup();
    advance(60_000);
    expect(watch.due([0, 1, 2]).size).toBe(0);
  });

  it('probes a head only once it was held for the grace, counted from the first claim that held it', () => {
    const { watch, advance } = setup({ graceMs: 10_000 });
    watch.held([head('a')]);
    advance(9_999);
    watch.held([head('a')]);
    expect(watch.due([0]).size).toBe(0);
    advance(1);
    expect(ids(watch.due([0]))).toEqual({ 0: ['a-row'] });
    expect(watch.heldFor(head('a').key)).toBe(10_000);
  });

  it('an event of the aggregate passing starts the grace again', () => {
    const { watch, advance } = setup({ graceMs: 1000 });
    watch.held([head('a')]);
    advance(900);
    watch.passed(head('a').key);
    watch.held([head('a', 0, 'next-row')]);
    advance(900);
    expect(watch.due([0]).size).toBe(0);
    advance(100);
    expect(ids(watch.due([0]))).toEqual({ 0: ['next-row'] });
  });

  it('at most one probe per second for the relay as a whole, all partitions in it', () => {
    const { watch, advance } = setup({ graceMs: 100 });
    watch.held([head('a', 0), head('b', 0), head('c', 1)]);
    advance(100);
    expect(ids(watch.due([0, 1, 2]))).toEqual({ 0: ['a-row', 'b-row'], 1: ['c-row'] });
    watch.missed(head('a').key);
    watch.held([head('d', 2)]);
    advance(500);
    // d is due, in a partition not probed yet: but the relay probed 500 ms ago.
    expect(watch.due([0, 1, 2]).size).toBe(0);
    advance(500);
    // a too: its miss put it off for twice the grace only.
    expect(ids(watch.due([0, 1, 2]))).toEqual({ 0: ['a-row', 'b-row'], 1: ['c-row'], 2: ['d-row'] });
  });

  it('nothing due: the next head due is probed at once', () => {
    const { watch, advance } = setup({ graceMs: 100 });
    watch.held([head('a', 0)]);
    expect(watch.due([0]).size).toBe(0);
    advance(100);
    expect(watch.due([0]).size).toBe(1);
  });

  it('only partitions the relay holds', () => {
    const { watch, advance } = setup({ graceMs: 100 });
    watch.held([head('a', 3)]);
    advance(100);
    expect(watch.due([0, 1]).size).toBe(0);
    expect(ids(watch.due([3]))).toEqual({ 3: ['a-row'] });
  });

  it('a probe that found an earlier event puts the head off for twice the wait each time, up to a minute', () => {
    const { watch, advance } = setup({ graceMs: 10_000 });
    const a = head('a');
    watch.held([a]);
    advance(10_000);
    for (const wait of [20_000, 40_000, 60_000, 60_000]) {
      expect(watch.due([0]).size).toBe(1);
      watch.missed(a.key);
      advance(wait - 1);
      watch.held([a]);
      expect(watch.due([0]).size).toBe(0);
      advance(1);
    }
    expect(watch.due([0]).size).toBe(1);
  });

  it('a bridged head is forgotten', () => {
    const { watch, advance } = setup({ graceMs: 100 });
    watch.held([head('a')]);
    advance(100);
    expect(watch.due([0]).size).toBe(1);
    watch.bridged(head('a').key);
    advance(5000);
    expect(watch.due([0]).size).toBe(0);
    expect(watch.size).toBe(0);
  });

  it('is bounded: heads not seen for forgetMs go; a full watch of heads not probed yet lets new ones wait', () => {
    const { watch, advance } = setup({ graceMs: 100, max: 2, forgetMs: 5000 });
    watch.held([head('a'), head('b'), head('c')]);
    expect(watch.size).toBe(2);
    expect(watch.heldFor(head('c').key)).toBeUndefined();
    advance(3000);
    watch.held([head('a')]);
    advance(2500);
    watch.held([head('c')]); // b not seen for 5.5 s: dropped, room for c
    expect(watch.heldFor(head('b').key)).toBeUndefined();
    expect(watch.heldFor(head('a').key)).toBe(5500);
    expect(watch.heldFor(head('c').key)).toBe(0);
  });

  it('a full watch evicts the least recently seen head a probe found waiting, never one not probed yet', () => {
    const { watch, advance } = setup({ graceMs: 100, max: 3, forgetMs: 60_000 });
    watch.held([head('a'), head('b'), head('c')]);
    advance(100);
    expect(watch.due([0]).get(0)).toHaveLength(3);
    for (const k of ['a', 'b']) watch.missed(head(k).key); // c was not answered (say, bridged later)
    advance(10);
    watch.held([head('b')]); // b seen again: a is now the least recently seen of the probed
    watch.held([head('new')]);
    expect(watch.heldFor(head('a').key)).toBeUndefined();
    expect(watch.heldFor(head('new').key)).toBe(0);
    expect(watch.size).toBe(3);
    // Then b goes for the next newcomer; c and new (never found waiting) stay, and the last waits.
    watch.held([head('newer'), head('newest')]);
    expect(watch.heldFor(head('b').key)).toBeUndefined();
    expect(watch.heldFor(head('newer').key)).toBe(0);
    expect(watch.heldFor(head('newest').key)).toBeUndefined();
    expect(watch.heldFor(head('c').key)).toBe(110);
  });

  it('a real gap is probed even while more heads than max wait behind deliverAfter, all seen at every claim', () => {
    const { watch, advance } = setup({ graceMs: 10_000, max: 1000 });
    const waiting = Array.from({ length: 1000 }, (_, i) => head(`sched${i}`, i % 16));
    const realGap = head('real-gap', 3);
    let probed = false;
    for (let t = 0; t < 600_000 && !probed; t += 1000) {
      watch.held([...waiting, realGap]);
      for (const [, heads] of watch.due([...Array(16).keys()])) {
        for (const h of heads) {
          if (h.key === realGap.key) probed = true;
          else watch.missed(h.key); // the probe finds each one's scheduled earlier event
        }
      }
      advance(1000);
    }
    expect(probed).toBe(true);
    expect(watch.size).toBeLessThanOrEqual(1000);
  });

  it(`probes at most ${MAX_HEADS_PER_PROBE} heads at once, over all partitions; the rest in the next probe`, () => {
    const { watch, advance } = setup({ graceMs: 100 });
    watch.held(Array.from({ length: MAX_HEADS_PER_PROBE + 5 }, (_, i) => head(`h${i}`, i % 3)));
    advance(100);
    const first = [...watch.due([0, 1, 2]).values()].flat();
    expect(first).toHaveLength(MAX_HEADS_PER_PROBE);
    for (const h of first) watch.bridged(h.key);
    advance(1000);
    expect([...watch.due([0, 1, 2]).values()].flat()).toHaveLength(5);
  });
});

describe('repeat reason', () => {
  it('names both numbers, the aggregate and the fix', () => {
    expect(repeatReason({ aggregate_type: 'order', aggregate_id: '42', sequence: '5' }, '5')).toBe(
      'sequence 5 of order/42 repeats one already delivered (5): caller versions must rise by one per event; ' +
        'do not mix default and caller sequences in one aggregate. It was not published; ' +
        '`tx-outbox dead skip --no-publish` removes it',
    );
  });
});
