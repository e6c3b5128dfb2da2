/** WAL mode's slot check: the refusals, and one query per 5 s per schema and slot (a verdict either way). */
import { describe, expect, it } from 'vitest';
import type { SqlExecutor } from '../../src/producer/executor.js';
import { slotRefusal, WAL_SLOT_CACHE_MS, WalSlotGate, walSlotName } from '../../src/producer/wal-slot.js';

const ok = {
  wal_level: 'logical',
  slot: 'txo_shop',
  exists: true,
  plugin: 'pgoutput',
  slot_type: 'logical',
  database: 'shop',
  here: true,
  wal_status: 'reserved',
};

describe('slotRefusal', () => {
  it('accepts a live pgoutput slot of this database', () => {
    expect(slotRefusal(ok, 'outbox')).toBeUndefined();
    expect(slotRefusal({ ...ok, wal_status: 'unreserved' }, 'outbox')).toBeUndefined();
  });

  it('refuses wal_level below logical with TXO_CDC_WAL_LEVEL', () => {
    const e = slotRefusal({ ...ok, wal_level: 'replica' }, 'outbox');
    expect(e?.code).toBe('TXO_CDC_WAL_LEVEL');
    expect(e?.message).toMatch(/wal_level = replica.*ALTER SYSTEM SET wal_level = logical/);
  });

  it.each([
    [
      { ...ok, exists: false, plugin: null, slot_type: null, database: null, here: null, wal_status: null },
      /does not exist/,
    ],
    [{ ...ok, wal_status: 'lost' }, /is lost/],
    [{ ...ok, plugin: 'test_decoding' }, /not a pgoutput logical slot/],
    [{ ...ok, slot_type: 'physical', plugin: null, database: null }, /not a pgoutput logical slot/],
    [{ ...ok, database: 'billing', here: false }, /belongs to another database \("billing"\)/],
  ])('refuses %o with TXO_CDC_NO_SLOT naming the slot and migrate --cdc', (row, problem) => {
    const e = slotRefusal(row, 'shop');
    expect(e?.code).toBe('TXO_CDC_NO_SLOT');
    expect(e?.message).toMatch(problem);
    expect(e?.message).toContain('replication slot "txo_shop" of schema "shop"');
    expect(e?.message).toContain('tx-outbox migrate --cdc --schema shop');
  });

  it('leaves the default slot to the database (undefined) and validates an override', () => {
    expect(walSlotName('shop', undefined)).toBeUndefined();
    expect(walSlotName('shop', 'relay_a')).toBe('relay_a');
    expect(() => walSlotName('shop', 'Relay-A')).toThrow(/slot: "Relay-A" is not a valid slot name/);
  });
});

describe('WalSlotGate', () => {
  it('queries once per 5 s per schema and slot, and caches a refusal as well', async () => {
    let now = 0;
    let row: Record<string, unknown> = ok;
    let queries = 0;
    let values: readonly unknown[] = [];
    const tx: SqlExecutor & { connectionParameters: object } = {
      connectionParameters: { host: 'h', port: 5432, database: 'd' },
      query: async (q) => {
        queries++;
        values = q.values;
        return { rows: [row] as never[] };
      },
    };
    const gate = new WalSlotGate(() => now);
    await gate.check(tx, 'a', 'txo_a', true);
    await gate.check(tx, 'a', 'txo_a', true);
    expect(queries).toBe(1);
    await gate.check(tx, 'b', 'txo_b', true);
    expect(queries).toBe(2);
    expect(values).toEqual(['txo_b', 'b']);
    // The default slot: resolved by the statement (null), a verdict of its own.
    await gate.check(tx, 'b', undefined, true);
    await gate.check(tx, 'b', undefined, true);
    expect(queries).toBe(3);
    expect(values).toEqual([null, 'b']);
    queries = 2;
    row = { ...ok, exists: false };
    now = WAL_SLOT_CACHE_MS - 1;
    await gate.check(tx, 'a', 'txo_a', true); // still the cached verdict
    expect(queries).toBe(2);
    now = WAL_SLOT_CACHE_MS;
    await expect(gate.check(tx, 'a', 'txo_a', true)).rejects.toMatchObject({ code: 'TXO_CDC_NO_SLOT' });
    await expect(gate.check(tx, 'a', 'txo_a', true)).rejects.toMatchObject({ code: 'TXO_CDC_NO_SLOT' });
    expect(queries).toBe(3);
    row = ok;
    gate.reset();
    await gate.check(tx, 'a', 'txo_a', true);
    expect(queries).toBe(4);
  });

  it('does not cache a failed query', async () => {
    let fail = true;
    const tx: SqlExecutor = {
      query: async () => {
        if (fail) throw new Error('connection lost');
        return { rows: [ok] as never[] };
      },
    };
    const gate = new WalSlotGate(() => 0);
    await expect(gate.check(tx, 'a', 'txo_a', false)).rejects.toThrow('connection lost');
    fail = false;
    await gate.check(tx, 'a', 'txo_a', false);
  });
});
