import { describe, expect, it } from 'vitest';
import { decideOrder } from '../../src/inbox/ordering.js';

describe('inbox ordering policies', () => {
  it('strict applies only the next sequence', () => {
    expect(decideOrder('strict', 4, 5)).toBe('apply');
    expect(decideOrder('strict', 4, 7)).toBe('gap');
    expect(decideOrder('strict', 4, 4)).toBe('stale');
    expect(decideOrder('strict', 4, 2)).toBe('stale');
  });
  it('strict starts an unseen aggregate at sequence 1, or at the first delivered with first-seen', () => {
    expect(decideOrder('strict', undefined, 1)).toBe('apply');
    expect(decideOrder('strict', undefined, 2)).toBe('gap');
    expect(decideOrder('strict', undefined, 7, 7)).toBe('apply');
    expect(decideOrder('strict', undefined, 6, 7)).toBe('stale');
    expect(decideOrder('strict', undefined, 9, 'first-seen')).toBe('apply');
    expect(decideOrder('skip-stale', undefined, 9)).toBe('apply');
  });
  it('skip-stale applies anything newer and skips the rest', () => {
    expect(decideOrder('skip-stale', 4, 9)).toBe('apply');
    expect(decideOrder('skip-stale', 4, 4)).toBe('stale');
    expect(decideOrder('skip-stale', undefined, 1)).toBe('apply');
  });
  it('none applies everything', () => {
    expect(decideOrder('none', 9, 1)).toBe('apply');
  });
});
