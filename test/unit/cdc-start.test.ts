import type { Pool } from 'pg';
import { describe, expect, it } from 'vitest';
import { Handover } from '../../src/cdc/handover.js';

/** The start read's rows, as START_SET_SQL returns them (the statement itself runs in test/integration/cdc-start). */
function startRows(
  rows: Array<{ key: string; min: number; max: number; delivered?: number; polled?: boolean }>,
): Pool {
  const result = rows.map((r) => ({
    key: r.key,
    min_sequence: String(r.min),
    max_sequence: String(r.max),
    delivered: String(r.delivered ?? 0),
    polled: r.polled ?? false,
  }));
  return { query: async () => ({ rows: result }) } as unknown as Pool;
}

describe('Handover at start', () => {
  it('polls failed aggregates at once and keeps the others unknown', async () => {
    const h = new Handover('"outbox"', '');
    const start = await h.rebuild(
      startRows([
        { key: 'o\u001fa', min: 3, max: 5, polled: true },
        { key: 'o\u001fb', min: 1, max: 2 },
      ]),
    );
    expect(start).toEqual({ polled: ['o\u001fa'], unknown: 1 });
    expect(h.isPolled('o\u001fa')).toBe(true);
    expect(h.isUnknown('o\u001fb')).toBe(true);
    expect(h.size).toBe(1);
  });

  it('gives the stream an aggregate whose lowest row (or an earlier WAL event) streams first', async () => {
    const h = new Handover('"outbox"', '');
    await h.rebuild(
      startRows([
        { key: 't', min: 4, max: 6, delivered: 3 },
        { key: 'w', min: 4, max: 6, delivered: 2 },
        { key: 'x', min: 4, max: 6, delivered: 3 },
      ]),
    );
    expect(h.resolve('t', 4, 'table')).toBe('stream');
    expect(h.resolve('w', 3, 'wal')).toBe('stream');
    // Not the lowest row's WAL twin (a handover row): P's.
    expect(h.resolve('x', 4, 'wal')).toBe('handover');
    expect(h.isUnknown('t') || h.isUnknown('w') || h.isUnknown('x')).toBe(false);
    expect(h.isPolled('t') || h.isPolled('w')).toBe(false);
    expect(h.isPolled('x')).toBe(true);
  });

  it('hands over an aggregate whose first streamed event is above its lowest row, its rows claimable', async () => {
    const h = new Handover('"outbox"', '');
    await h.rebuild(startRows([{ key: 'p', min: 6, max: 7, delivered: 5 }]));
    expect(h.resolve('p', 8, 'table')).toBe('handover');
    expect(h.isPolled('p')).toBe(true);
    expect(h.claimScope()).toEqual({ p: 7 });
    // Its rows in the table are not published by the stream again.
    expect(h.skips('p', 7, 'table')).toBe(true);
    expect(h.caughtUp()).toEqual(['p']);
  });

  it('skips a WAL-mode event already delivered, keeping the aggregate unknown', async () => {
    const h = new Handover('"outbox"', '');
    await h.rebuild(startRows([{ key: 'h', min: 6, max: 7, delivered: 5 }]));
    expect(h.resolve('h', 5, 'wal')).toBe('skip');
    expect(h.isUnknown('h')).toBe(true);
  });

  it('hands every aggregate still unknown at the catch-up to P', async () => {
    const h = new Handover('"outbox"', '');
    await h.rebuild(
      startRows([
        { key: 'd', min: 1, max: 3 },
        { key: 's', min: 1, max: 2 },
      ]),
    );
    expect(h.resolve('s', 1, 'table')).toBe('stream');
    expect(h.caughtUp()).toEqual(['d']);
    expect(h.unknownSize).toBe(0);
    expect(h.claimScope()).toEqual({ d: 3 });
    expect(h.caughtUp()).toEqual([]);
  });

  it('serialises the claim scope again only when it changed', async () => {
    const h = new Handover('"outbox"', '');
    await h.rebuild(startRows([{ key: 'a', min: 1, max: 3, polled: true }]));
    const first = h.claimScopeJson();
    expect(h.claimScopeJson()).toBe(first);
    h.enter('b', 4);
    expect(h.claimScopeJson()).toBe(first);
    h.claimableUpTo('b', 4);
    expect(JSON.parse(h.claimScopeJson())).toEqual({ a: 3, b: 4 });
  });
});
