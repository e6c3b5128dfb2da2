import { describe, expect, it } from 'vitest';
import { PartitionBook } from '../../src/consumers/kafka/partitions.js';

/** A book whose assignment the test sets (undefined: before any assignment). */
function book(initial?: number[]) {
  let assigned: number[] | undefined = initial;
  const b = new PartitionBook(() => assigned);
  return {
    b,
    assign(partitions: number[] | undefined) {
      assigned = partitions;
    },
  };
}

const offsets = (entries: { partition: number; offset: bigint }[]) =>
  entries.map((e) => [e.partition, e.offset]);

describe('PartitionBook', () => {
  it('commits only the handled prefix of a partition, in arrival order', () => {
    const { b } = book();
    const r0 = b.receive(0, 10n)!;
    const r1 = b.receive(0, 11n)!;
    const r2 = b.receive(0, 12n)!;
    expect(b.handled(r1)).toBe(false); // 10 not handled yet: nothing moves
    expect(b.collect()).toEqual([]);
    expect(b.handled(r0)).toBe(true); // 10 and 11 handled: commit point 12
    expect(offsets(b.collect())).toEqual([[0, 12n]]);
    expect(b.collect()).toEqual([]); // taken out once
    expect(b.handled(r2)).toBe(true);
    expect(offsets(b.collect())).toEqual([[0, 13n]]);
    expect(b.uncommitted).toBe(false);
  });

  it('skips what was received already (a re-read) and records of partitions not assigned', () => {
    const { b, assign } = book([0]);
    expect(b.receive(0, 5n)).toBeDefined();
    expect(b.receive(0, 5n)).toBeUndefined();
    expect(b.receive(0, 4n)).toBeUndefined();
    expect(b.receive(1, 0n)).toBeUndefined();
    assign([0, 1]);
    expect(b.receive(1, 0n)).toBeDefined(); // not joined yet: any partition starts with its first record
  });

  it('a failed commit puts its points back; commit points never move backwards', () => {
    const { b } = book();
    const r0 = b.receive(0, 0n)!;
    b.handled(r0);
    const failed = b.collect();
    expect(offsets(failed)).toEqual([[0, 1n]]);
    expect(b.uncommitted).toBe(false);
    expect(b.restore(failed)).toBe(true);
    expect(b.uncommitted).toBe(true);
    expect(offsets(b.collect())).toEqual([[0, 1n]]);
    // A newer point went out meanwhile: an older failed one put back is never committed after it.
    const r1 = b.receive(0, 1n)!;
    b.handled(r1);
    const newer = b.collect();
    expect(offsets(newer)).toEqual([[0, 2n]]);
    b.restore([{ ...newer[0]!, offset: 1n, previous: 0n }]);
    expect(b.collect()).toEqual([]);
  });

  it('a join forgets lost partitions: their records commit nothing and are no longer current', () => {
    const { b, assign } = book([0, 1]);
    const lost = b.receive(1, 7n)!;
    const kept = b.receive(0, 3n)!;
    b.handled(kept);
    assign([0]);
    expect(offsets(b.join())).toEqual([[0, 4n]]);
    expect(b.isCurrent(lost)).toBe(false);
    expect(b.isCurrent(kept)).toBe(true);
    expect(b.handled(lost)).toBe(false);
    expect(b.collect()).toEqual([]);
    // The kept partition's re-read is skipped up to what was received.
    expect(b.receive(0, 3n)).toBeUndefined();
    expect(b.receive(0, 4n)).toBeDefined();
  });

  it('after a join, a gained partition starts where the offsets event says; records buffered before are skipped', () => {
    const { b, assign } = book([0]);
    b.receive(0, 0n);
    assign([0, 2]);
    b.join();
    expect(b.receive(2, 50n)).toBeUndefined(); // gained, no 'offsets' yet
    b.offsets((p) => (p === 2 ? 40n : undefined), 1);
    expect(b.receive(2, 45n)).toBeUndefined(); // the one buffered record: fetched before
    expect(b.receive(2, 39n)).toBeUndefined(); // below where the stream reads it from
    const first = b.receive(2, 40n)!;
    expect(first).toBeDefined();
    expect(b.handled(first)).toBe(true);
    expect(offsets(b.collect())).toEqual([[2, 41n]]);
  });

  it('collects nothing for a partition that is no longer assigned', () => {
    const { b, assign } = book([0]);
    b.handled(b.receive(0, 0n)!);
    assign([]);
    expect(b.collect()).toEqual([]);
  });
});
