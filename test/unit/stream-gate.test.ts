import { describe, expect, it } from 'vitest';
import { formatLsn } from '../../src/cdc/lsn.js';
import type { StreamEvent } from '../../src/cdc/stream-batch.js';
import { RefusalBound, StreamGate } from '../../src/cdc/stream-gate.js';

function event(
  key: string,
  sequence: number,
  via: 'table' | 'wal',
  lsn = 100n,
  callerVersion = true,
): StreamEvent {
  return {
    via,
    key,
    message: { id: via === 'wal' ? `wal:${formatLsn(lsn)}` : '1', sequence },
    ...(via === 'wal' ? { wal: { callerVersion } } : {}),
  } as unknown as StreamEvent;
}

describe('StreamGate', () => {
  it('passes the next sequence only; a repeat or a gap is handed over with the last delivered', () => {
    const gate = new StreamGate('"s"');
    gate.clear(50n);
    expect(gate.check(event('a', 1, 'wal'))).toEqual({ kind: 'unknown' });
    gate.learn('a', 0);
    expect(gate.check(event('a', 1, 'wal')).kind).toBe('pass');
    expect(gate.check(event('a', 2, 'wal')).kind).toBe('pass');
    expect(gate.check(event('a', 2, 'wal'))).toEqual({ kind: 'handover', delivered: 2, repeat: true });
    expect(gate.check(event('a', 4, 'wal'))).toEqual({ kind: 'handover', delivered: 2, repeat: false });
    expect(gate.check(event('a', 3, 'wal')).kind).toBe('pass');
  });

  it('looks up no table-mode aggregate first seen at sequence 1 (a new aggregate), only later ones', () => {
    const gate = new StreamGate('"s"');
    gate.clear(50n);
    const events = [event('new', 1, 'table'), event('old', 7, 'table'), event('wal', 1, 'wal')];
    expect(gate.unknown(events, () => false)).toEqual(['old', 'wal']);
    expect(gate.check(events[0]!).kind).toBe('pass');
    expect(gate.check(event('new', 2, 'table')).kind).toBe('pass');
    expect(gate.check(event('new', 2, 'table'))).toEqual({ kind: 'handover', delivered: 2, repeat: true });
  });

  it('skips a WAL-mode event below the next written before the session (a replay), not a table row', () => {
    const gate = new StreamGate('"s"');
    gate.clear(500n);
    gate.learn('a', 5);
    expect(gate.check(event('a', 5, 'wal', 400n)).kind).toBe('skip');
    expect(gate.check(event('a', 5, 'wal', 600n)).kind).toBe('handover');
    expect(gate.check(event('a', 5, 'table')).kind).toBe('handover');
    expect(gate.check(event('a', 6, 'wal', 400n)).kind).toBe('pass');
  });

  it('passes the rows of an aggregate with a sequence row, and follows default WAL events', () => {
    const gate = new StreamGate('"s"');
    gate.clear(0n);
    gate.learn('a', 1, true);
    expect(gate.check(event('a', 5, 'table')).kind).toBe('pass');
    gate.learn('b', 1, false);
    gate.passed(event('b', 2, 'wal', 1n, false));
    expect(gate.check(event('b', 3, 'table')).kind).toBe('pass');
  });

  it('gates table rows without a base and caller-versioned WAL events only', () => {
    expect(StreamGate.gated(event('a', 1, 'table'))).toBe(true);
    expect(StreamGate.gated(event('a', 1, 'wal'))).toBe(true);
    expect(StreamGate.gated(event('a', 1, 'wal', 1n, false))).toBe(false);
  });

  it('a passed event given back is expected again', () => {
    const gate = new StreamGate('"s"');
    gate.clear(0n);
    gate.learn('a', 3);
    const four = event('a', 4, 'table');
    expect(gate.check(four).kind).toBe('pass');
    expect(gate.check(event('a', 5, 'table')).kind).toBe('pass');
    gate.unpass(four);
    gate.unpass(event('a', 5, 'table'));
    expect(gate.check(four).kind).toBe('pass');
  });

  it('is bounded: the least recently seen aggregate is forgotten', () => {
    const gate = new StreamGate('"s"', 2);
    gate.learn('a', 1);
    gate.learn('b', 1);
    gate.check(event('a', 2, 'table'));
    gate.learn('c', 1);
    expect(gate.known).toBe(2);
    expect(gate.check(event('b', 2, 'table')).kind).toBe('unknown');
  });
});

describe('RefusalBound', () => {
  it('hands over an aggregate refused 3 times while others were delivered', () => {
    const bound = new RefusalBound(3, 30_000, () => 0);
    expect(bound.judged(['x'], ['down'])).toEqual([]);
    expect(bound.judged([], ['down'])).toEqual([]);
    expect(bound.judged([], ['down'])).toEqual(['down']);
  });

  it('keeps waiting in memory while nothing at all is delivered (the broker down)', () => {
    const bound = new RefusalBound(3, 30_000, () => 0);
    for (let i = 0; i < 10; i++) expect(bound.judged([], ['a', 'b'])).toEqual([]);
    expect(bound.judged(['c'], ['a'])).toEqual(['a']);
  });

  it('hands over after the time bound, and forgets an aggregate once delivered', () => {
    let now = 0;
    const bound = new RefusalBound(100, 1000, () => now);
    expect(bound.judged(['x'], ['down'])).toEqual([]);
    now = 1000;
    expect(bound.judged([], ['down'])).toEqual(['down']);
    expect(bound.judged(['x'], ['flaky'])).toEqual([]);
    expect(bound.judged(['flaky'], [])).toEqual([]);
    now = 5000;
    expect(bound.judged([], ['flaky'])).toEqual([]);
  });
});
