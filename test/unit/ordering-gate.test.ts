import { describe, expect, it } from 'vitest';
import { waves } from '../../src/relay/ordering-gate.js';

const e = (aggregateId: string, sequence: number) => ({ aggregateType: 'o', aggregateId, sequence });

describe('ordering gate waves', () => {
  it('puts distinct aggregates in one wave', () => {
    expect(waves([e('a', 1), e('b', 1), e('c', 4)])).toEqual([[e('a', 1), e('b', 1), e('c', 4)]]);
  });

  it('spreads one aggregate over waves in sequence order, whatever the input order', () => {
    const w = waves([e('a', 3), e('b', 1), e('a', 1), e('a', 2), e('b', 2)]);
    expect(w).toEqual([[e('a', 1), e('b', 1)], [e('a', 2), e('b', 2)], [e('a', 3)]]);
  });

  it('never puts two events of one aggregate in one wave', () => {
    const batch = Array.from({ length: 500 }, (_, i) => e(`k${i % 13}`, Math.floor(i / 13) + 1));
    for (const wave of waves(batch)) {
      const keys = wave.map((x) => x.aggregateId);
      expect(new Set(keys).size).toBe(keys.length);
    }
  });

  it('keys aggregates by type and id together', () => {
    const w = waves([
      { aggregateType: 'a', aggregateId: '1', sequence: 1 },
      { aggregateType: 'b', aggregateId: '1', sequence: 1 },
    ]);
    expect(w).toHaveLength(1);
  });
});
