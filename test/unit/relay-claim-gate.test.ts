/**
 * The ordering gate over one claim's rows (src/relay/claim/claim-gate.ts). Rows gated by sequence:
 * against the rule it replaced in SQL (ranks by window functions over the batch, each row judged
 * on its own), the same verdict for every row of random batches, and the cases named in the rule.
 * Chained rows (previous_id, migration 15): against "every earlier event is delivered or passes in
 * this batch", on random histories, and mixed with rows gated by sequence.
 */
import { describe, expect, it } from 'vitest';
import { gateClaim } from '../../src/relay/claim/claim-gate.js';
import type { ClaimRow, Gate } from '../../src/relay/claim/claim-row.js';

let nextId = 1;
const row = (aggregateId: string, sequence: number, delivered: number, id = nextId++): ClaimRow => ({
  delivered: String(delivered),
  previous_id: null,
  waits: false,
  id: String(id),
  event_id: `e-${id}`,
  partition: 0,
  aggregate_type: 'order',
  aggregate_id: aggregateId,
  sequence: String(sequence),
  sequence_base: '0',
  event_type: 'order.updated',
  schema_version: 1,
  topic: null,
  payload: '{}',
  payload_bytes: null,
  headers: '{}',
  created_at: new Date(0),
  deliver_after: null,
  attempts: 0,
});

const gates = (rows: ClaimRow[]): Gate[] => gateClaim(rows);

/** The SQL rule, row by row: row_number and dense_rank over (aggregate, repeat) by (sequence, id). */
function reference(rows: readonly ClaimRow[]): Gate[] {
  return rows.map((r) => {
    const delivered = Number(r.delivered);
    const sequence = Number(r.sequence);
    if (sequence <= delivered) return 'repeat';
    const peers = rows
      .filter(
        (o) =>
          o.aggregate_type === r.aggregate_type &&
          o.aggregate_id === r.aggregate_id &&
          Number(o.sequence) > Number(o.delivered),
      )
      .sort((a, b) => Number(a.sequence) - Number(b.sequence) || Number(a.id) - Number(b.id));
    const rank = peers.indexOf(r) + 1;
    const distinct = new Set(peers.slice(0, rank).map((o) => o.sequence)).size;
    if (sequence === delivered + rank && rank === distinct) return 'pass';
    return rank === 1 ? 'gap' : 'hold';
  });
}

describe('the claim gate', () => {
  it('passes an aggregate run that starts right after delivered, in one claim', () => {
    expect(gates([row('a', 4, 3), row('b', 1, 0), row('a', 5, 3), row('a', 6, 3)])).toEqual([
      'pass',
      'pass',
      'pass',
      'pass',
    ]);
  });

  it('holds a gap at its head and everything behind it', () => {
    expect(gates([row('a', 5, 3), row('a', 6, 3), row('b', 1, 0)])).toEqual(['gap', 'hold', 'pass']);
  });

  it('holds from a missing sequence on', () => {
    expect(gates([row('a', 1, 0), row('a', 2, 0), row('a', 4, 0), row('a', 5, 0)])).toEqual([
      'pass',
      'pass',
      'hold',
      'hold',
    ]);
  });

  it('gives a repeat no rank: the events after it pass', () => {
    expect(gates([row('a', 2, 3), row('a', 4, 3), row('a', 3, 3)])).toEqual(['repeat', 'pass', 'repeat']);
  });

  it('holds a sequence that comes twice, and everything after it', () => {
    expect(gates([row('a', 1, 0), row('a', 2, 0), row('a', 2, 0), row('a', 3, 0)])).toEqual([
      'pass',
      'pass',
      'hold',
      'hold',
    ]);
  });

  it('ranks by sequence, then id, whatever the claim order', () => {
    const rows = [row('a', 2, 0, 10), row('a', 1, 0, 11)];
    expect(gates(rows)).toEqual(['pass', 'pass']);
  });

  it('holds the rows of an aggregate with an event in flight (payload withheld), even where the rule passes them', () => {
    const rows = [row('a', 4, 3), row('a', 5, 3), row('b', 1, 0), row('c', 7, 3)];
    rows[0]!.withheld = true;
    rows[1]!.withheld = true;
    rows[3]!.withheld = true;
    expect(gates(rows)).toEqual(['hold', 'hold', 'pass', 'gap']);
  });

  it('drops the payloads of rows held back, keeps those that pass, and adds no property to the rows', () => {
    const rows = [row('a', 1, 0), row('b', 3, 0)];
    const keys = rows.map((r) => Object.keys(r).join());
    expect(gateClaim(rows)).toEqual(['pass', 'gap']);
    expect(rows.map((r) => r.payload)).toEqual(['{}', null]);
    expect(rows.map((r) => Object.keys(r).join())).toEqual(keys);
  });

  it('agrees with the SQL rule on random batches', () => {
    let seed = 42;
    const random = (n: number): number => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed % n;
    };
    for (let batch = 0; batch < 2_000; batch++) {
      const delivered = new Map<string, number>();
      const rows: ClaimRow[] = [];
      const size = 1 + random(12);
      for (let i = 0; i < size; i++) {
        const aggregate = `a${random(3)}`;
        if (!delivered.has(aggregate)) delivered.set(aggregate, random(3));
        rows.push(row(aggregate, 1 + random(6), delivered.get(aggregate)!, 1 + random(1_000) * 1_000 + i));
      }
      rows.sort((a, b) => Number(a.id) - Number(b.id));
      const expected = reference(rows);
      expect(gates(rows)).toEqual(expected);
    }
  });
});

/** A chained row: its aggregate's previous event is `previous` (0: none), still in the table or not. */
const linked = (
  aggregateId: string,
  sequence: number,
  id: number,
  previous: number,
  waits: boolean,
): ClaimRow => ({
  ...row(aggregateId, sequence, 0, id),
  delivered: null,
  previous_id: String(previous),
  waits,
});

describe('the claim gate, chained rows', () => {
  it('passes a row whose previous event left the table, and a run behind it in one claim', () => {
    expect(
      gates([linked('a', 4, 10, 7, false), linked('a', 5, 11, 10, true), linked('a', 6, 12, 11, true)]),
    ).toEqual(['pass', 'pass', 'pass']);
  });

  it('holds a row whose previous event is still in the table and not in the claim, and what follows', () => {
    expect(
      gates([linked('a', 5, 11, 10, true), linked('a', 6, 12, 11, true), linked('b', 1, 13, 0, false)]),
    ).toEqual(['hold', 'hold', 'pass']);
  });

  it('follows the chain, not the id order (a row drawn its id before its predecessor)', () => {
    expect(gates([linked('a', 2, 20, 21, true), linked('a', 1, 21, 0, false)])).toEqual(['pass', 'pass']);
  });

  it('holds the rows of an aggregate with an event in flight', () => {
    const rows = [linked('a', 2, 20, 19, true), linked('b', 1, 21, 0, false)];
    rows[0]!.withheld = true;
    expect(gates(rows)).toEqual(['hold', 'pass']);
  });

  it('lets a row gated by sequence follow a chained row that passes, whatever the stale progress says', () => {
    // a/5 was written by a producer that does not keep the chain: progress still says 3.
    expect(gates([linked('a', 4, 30, 29, false), row('a', 5, 3, 31), linked('a', 6, 32, 31, true)])).toEqual([
      'pass',
      'pass',
      'pass',
    ]);
  });

  it('holds a row gated by sequence at a gap, and the chained row after it', () => {
    expect(gates([row('a', 5, 3, 40), linked('a', 6, 41, 40, true)])).toEqual(['gap', 'hold']);
  });

  it('agrees with "every earlier event is delivered or passes before it" on random histories', () => {
    let seed = 7;
    const random = (n: number): number => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed % n;
    };
    for (let batch = 0; batch < 2_000; batch++) {
      // Per aggregate: events 1..n with ids; a prefix delivered; the rest in the table, some due.
      const rows: ClaimRow[] = [];
      const inTable = new Map<string, Set<number>>();
      let id = 1;
      for (const aggregate of ['a', 'b', 'c']) {
        const n = 1 + random(6);
        const delivered = random(n + 1);
        const table = new Set<number>();
        let previous = 0;
        for (let sequence = 1; sequence <= n; sequence++) {
          const rowId = id++;
          if (sequence > delivered) {
            table.add(sequence);
            // Claimed unless scheduled for later (not due): such a row is not in the claim.
            if (random(4) > 0)
              rows.push(
                linked(aggregate, sequence, rowId, previous, previous !== 0 && sequence - 1 > delivered),
              );
          }
          previous = rowId;
        }
        inTable.set(aggregate, table);
      }
      rows.sort((x, y) => Number(x.id) - Number(y.id));
      const claimed = new Set(rows.map((r) => `${r.aggregate_id}/${r.sequence}`));
      const expected = rows.map((r): Gate => {
        for (let s = 1; s < Number(r.sequence); s++)
          if (inTable.get(r.aggregate_id)!.has(s) && !claimed.has(`${r.aggregate_id}/${s}`)) return 'hold';
        return 'pass';
      });
      expect(gates(rows)).toEqual(expected);
    }
  });
});
