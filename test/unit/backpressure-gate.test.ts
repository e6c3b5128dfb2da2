import { afterEach, describe, expect, it, vi } from 'vitest';
import { OutboxBackpressureError } from '../../src/errors.js';
import {
  BACKLOG_CACHE_MS,
  BACKPRESSURE_WARN_INTERVAL_MS,
  type BackpressureCheck,
  BackpressureGate,
} from '../../src/producer/backpressure.js';
import type { SqlExecutor } from '../../src/producer/executor.js';
import { logRecorder } from '../helpers/log-recorder.js';

/** A stand-in for the published-backlog row: pure cache and cadence logic, no database behaviour. */
function executor(row: { pending: string | null; dead?: string; fresh: boolean; live: string }) {
  const calls: string[] = [];
  const tx: SqlExecutor = {
    query: async (q) => {
      calls.push(q.text);
      return { rows: [{ dead: '0', ...row }] as never[] };
    },
  };
  return { tx, calls, row };
}

function setup(mode: 'throw' | 'warn' = 'throw') {
  let now = 1_000_000;
  const gate = new BackpressureGate(() => now);
  const { lines, logger } = logRecorder();
  const check: BackpressureCheck = { schema: 'outbox', maxPending: 100, mode, prepared: true, logger };
  return { gate, check, lines, advance: (ms: number) => (now += ms) };
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('BackpressureGate', () => {
  it('reads once per cache period and per schema', async () => {
    const { gate, check, advance } = setup();
    const db = executor({ pending: '5', fresh: true, live: '0' });
    await gate.check(db.tx, check);
    await gate.check(db.tx, check);
    advance(BACKLOG_CACHE_MS - 1);
    await gate.check(db.tx, check);
    expect(db.calls).toHaveLength(1);
    advance(1);
    await gate.check(db.tx, check);
    expect(db.calls).toHaveLength(2);
    await gate.check(db.tx, { ...check, schema: 'other' });
    expect(db.calls).toHaveLength(3);
  });

  it('throws at the ceiling with the figure and where it comes from (pendingFrom)', async () => {
    const { gate, check } = setup();
    const fresh = executor({ pending: '100', fresh: true, live: '7' });
    await expect(gate.check(fresh.tx, check)).rejects.toMatchObject({
      code: 'TXO_BACKPRESSURE',
      pending: 100,
      ceiling: 100,
      pendingFrom: 'relay',
    });
    const stale = setup();
    const none = executor({ pending: null, dead: '3', fresh: false, live: '150' });
    const error = await stale.gate.check(none.tx, stale.check).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxBackpressureError);
    expect(error).toMatchObject({ pending: 147, pendingFrom: 'estimate' });
  });

  it('still answers the deprecated `source` as `pendingFrom`, warning once', () => {
    const emit = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const error = new OutboxBackpressureError('outbox', 5, 5, 'relay');
      expect(error.source).toBe('relay');
      expect(new OutboxBackpressureError('outbox', 5, 5, 'estimate').source).toBe('estimate');
      expect(emit).toHaveBeenCalledTimes(1);
      expect(String(emit.mock.calls[0]![0])).toMatch(
        /^OutboxBackpressureError: property `source` is deprecated, use `pendingFrom`/,
      );
      expect(emit.mock.calls[0]![1]).toMatchObject({ type: 'DeprecationWarning' });
    } finally {
      emit.mockRestore();
    }
  });

  it('a fresh relay figure below the live-row count does not hide the backlog (a relay that just died)', async () => {
    const { gate, check } = setup();
    // The relay last measured 0 pending; since then producers wrote 1,000 rows the statistics see.
    const db = executor({ pending: '0', fresh: true, live: '1000' });
    await expect(gate.check(db.tx, check)).rejects.toMatchObject({
      code: 'TXO_BACKPRESSURE',
      pending: 1000,
      pendingFrom: 'estimate',
    });
  });

  it("'warn' logs once per interval and never throws", async () => {
    const { gate, check, lines, advance } = setup('warn');
    const db = executor({ pending: '500', fresh: true, live: '0' });
    await gate.check(db.tx, check);
    advance(BACKPRESSURE_WARN_INTERVAL_MS - 1);
    await gate.check(db.tx, check);
    expect(lines.filter((l) => l.level === 'warn')).toHaveLength(1);
    advance(1);
    await gate.check(db.tx, check);
    expect(lines.filter((l) => l.level === 'warn')).toHaveLength(2);
  });

  it("'warn' without a logger emits a process warning", async () => {
    const emit = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    const { gate, check } = setup('warn');
    const db = executor({ pending: '500', fresh: true, live: '0' });
    await gate.check(db.tx, { ...check, logger: undefined });
    expect(emit).toHaveBeenCalledTimes(1);
    expect(emit.mock.calls[0]![1]).toMatchObject({ code: 'TXO_BACKPRESSURE' });
  });

  it('a failed read is not cached: the next call reads again', async () => {
    const { gate, check } = setup();
    let fail = true;
    const calls: number[] = [];
    const tx: SqlExecutor = {
      query: async () => {
        calls.push(1);
        if (fail) throw new Error('connection lost');
        return { rows: [{ pending: '1', dead: '0', fresh: true, live: '0' }] as never[] };
      },
    };
    await expect(gate.check(tx, check)).rejects.toThrow('connection lost');
    fail = false;
    await gate.check(tx, check);
    expect(calls).toHaveLength(2);
  });

  it('callers during a refresh keep the previous figure instead of reading too', async () => {
    const { gate, check, advance } = setup();
    const db = executor({ pending: '5', fresh: true, live: '0' });
    await gate.check(db.tx, check);
    advance(BACKLOG_CACHE_MS);
    let release: () => void = () => undefined;
    const slow: SqlExecutor = {
      query: async () => {
        await new Promise<void>((r) => {
          release = r;
        });
        return { rows: [{ pending: '6', dead: '0', fresh: true, live: '0' }] as never[] };
      },
    };
    const refreshing = gate.check(slow, check);
    await gate.check(db.tx, check); // served from the previous figure
    expect(db.calls).toHaveLength(1);
    release();
    await refreshing;
  });
});
