import type { ClaimRow, Gate } from './claim-row.js';

/**
 * The ordering gate's claim half, over one claim's rows (id order, or sequence order for the
 * CDC hand-over's claim; see CLAIM_SQL). An event passes (`'pass'`) only when every earlier
 * event of its aggregate is delivered or passes in this batch before it. The rows of each
 * aggregate are taken in sequence order (then id), and each kind of row says so its own way:
 * - **Chained** rows (`previous_id` set: default sequences written by `enqueue` since migration
 *   15) name their aggregate's previous event: one passes when that event had left the table
 *   when the claim read it (`waits` false) or is the row that passed just before it.
 * - Rows **gated by sequence** (`previous_id` null) come with their aggregate's delivered
 *   sequence: one passes when its sequence is the next after the delivered one, or after the
 *   one that passed just before it in this batch (a chained row that passes proves every
 *   earlier sequence delivered or passing). Caller versions (`enqueue({ sequence })`) are
 *   checked by the producer within one call only: a row at or below the delivered sequence
 *   (as the claim read it) is a repeat (`'repeat'`): it can never be published in order, so it holds nothing back and the
 *   relay marks it dead (REPEAT_DEAD_SQL). A sequence that comes twice holds the second and what
 *   follows. An aggregate whose lowest claimable row is above delivered+1 is held at a gap
 *   (`'gap'`): after a grace the relay probes for an earlier event and, finding none, bridges it
 *   (BRIDGE_GAPS_SQL).
 * Once one row of an aggregate is held (`'hold'`), every later one is. A row of an aggregate
 * with an event in flight (`withheld`: the claim sent no payload) is held even where the rule
 * would pass it (that event's outcome landed just before the claim began); the next claim sees
 * it again. Returns each row's verdict, by index: the rows are node-postgres' own objects, and a
 * property added to them afterwards gives each its own hidden class in V8 and makes every later
 * read of them slow (measured: 10 reads 20 ns before, 2 µs after). The payloads of rows that do
 * not pass are dropped.
 */
export function gateClaim(rows: readonly ClaimRow[]): Gate[] {
  const gates = new Array<Gate>(rows.length);
  // The rows of each aggregate, as a chain of indexes: the first one's index per aggregate
  // (by type, then id: no key string per row), and for each row the next row of its aggregate.
  const first = new Map<string, Map<string, number>>();
  const next = new Int32Array(rows.length).fill(-1);
  const last = new Int32Array(rows.length);
  const heads: number[] = [];
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]!;
    let ofType = first.get(row.aggregate_type);
    if (ofType === undefined) {
      ofType = new Map();
      first.set(row.aggregate_type, ofType);
    }
    const head = ofType.get(row.aggregate_id);
    if (head === undefined) {
      ofType.set(row.aggregate_id, i);
      heads.push(i);
      last[i] = i;
    } else {
      next[last[head]!] = i;
      last[head] = i;
    }
  }
  // One list for every aggregate; most have one row in a claim, which needs no sort.
  const list: number[] = [];
  for (const head of heads) {
    list.length = 0;
    for (let i = head; i !== -1; i = next[i]!) list.push(i);
    if (list.length > 1) list.sort((a, b) => bySequenceThenId(rows[a]!, rows[b]!));
    gateAggregate(rows, list, gates);
  }
  return gates;
}

/** One aggregate's rows of a claim (indexes into `rows`), in sequence order (see {@link gateClaim}). */
function gateAggregate(rows: readonly ClaimRow[], list: readonly number[], gates: Gate[]): void {
  let passedId: string | undefined;
  let passedSequence = 0;
  let previousSequence: number | undefined;
  let held = false;
  let first = true;
  for (const i of list) {
    const row = rows[i]!;
    const sequence = Number(row.sequence);
    let gate: Gate;
    if (row.previous_id === null) {
      if (sequence <= Number(row.delivered)) {
        hold(row);
        gates[i] = 'repeat';
        continue;
      }
      const expected = Math.max(Number(row.delivered), passedSequence) + 1;
      if (!held && sequence === expected && sequence !== previousSequence && row.withheld !== true)
        gate = 'pass';
      else gate = first && sequence !== expected ? 'gap' : 'hold';
    } else if (!held && (!row.waits || row.previous_id === passedId) && row.withheld !== true) gate = 'pass';
    else gate = 'hold';
    gates[i] = gate;
    first = false;
    previousSequence = sequence;
    if (gate === 'pass') {
      passedId = row.id;
      passedSequence = sequence;
    } else {
      hold(row);
      held = true;
    }
  }
}

function bySequenceThenId(a: ClaimRow, b: ClaimRow): number {
  return Number(a.sequence) - Number(b.sequence) || Number(a.id) - Number(b.id);
}

/** A row that does not pass: its payload is dropped (an existing property set, no new one). */
function hold(row: ClaimRow): void {
  row.payload = null;
  row.payload_bytes = null;
}
