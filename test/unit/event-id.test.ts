import { validate, version } from 'uuid';
import { describe, expect, it } from 'vitest';
import { newEventId } from '../../src/producer/event-id.js';

describe('newEventId', () => {
  it('makes RFC 9562 version 7 UUIDs, as the uuid package reads them', () => {
    for (let i = 0; i < 2000; i++) {
      const id = newEventId();
      expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      expect(validate(id)).toBe(true);
      expect(version(id)).toBe(7);
    }
  });

  it('carries the creation time in its first 48 bits', () => {
    const before = Date.now();
    const id = newEventId();
    const after = Date.now();
    const ms = Number.parseInt(id.replaceAll('-', '').slice(0, 12), 16);
    expect(ms).toBeGreaterThanOrEqual(before);
    expect(ms).toBeLessThanOrEqual(after);
  });

  it('ids from one process strictly increase, within a millisecond and across the random pool refills', () => {
    let previous = newEventId();
    const seen = new Set([previous]);
    for (let i = 0; i < 100_000; i++) {
      const id = newEventId();
      expect(id > previous).toBe(true);
      seen.add(id);
      previous = id;
    }
    expect(seen.size).toBe(100_001);
  });

  it('keeps increasing when the clock steps back', () => {
    const real = Date.now;
    try {
      const first = newEventId();
      Date.now = () => real() - 60_000;
      const second = newEventId();
      expect(second > first).toBe(true);
    } finally {
      Date.now = real;
    }
  });

  it('fills its random bits: the tails of 5,000 ids do not repeat', () => {
    const tails = new Set<string>();
    for (let i = 0; i < 5000; i++) tails.add(newEventId().slice(-10));
    expect(tails.size).toBeGreaterThan(4990);
  });
});
