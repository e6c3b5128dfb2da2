import { aggregateKeyOf } from '../../aggregate-key.js';
import type { ClaimedRow, ClaimRow } from './claim-row.js';

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
 * it again. Rows are gated in place (no copy); the payloads of rows that do not pass are dropped.
 */
export function gateClaim(rows: readonly ClaimRow[]): ClaimedRow[] {
  const gated = rows as ClaimedRow[];
  // Most aggregates have one row in a claim: gated at once, without a list.
  const byAggregate = new Map<string, ClaimedRow | ClaimedRow[]>();
  for (const row of gated) {
    const key = aggregateKeyOf(row.aggregate_type, row.aggregate_id);
    const seen = byAggregate.get(key);
    if (seen === undefined) byAggregate.set(key, row);
    else if (Array.isArray(seen)) seen.push(row);
    else byAggregate.set(key, [seen, row]);
  }
  for (const rowsOf of byAggregate.values()) {
    if (Array.isArray(rowsOf)) gateAggregate(rowsOf.sort(bySequenceThenId));
    else gateAggregate([rowsOf]);
  }
  return gated;
}

/** One aggregate's rows of a claim, in sequence order (see {@link gateClaim}). */
function gateAggregate(list: readonly ClaimedRow[]): void {
  let passedId: string | undefined;
  let passedSequence = 0;
  let previousSequence: number | undefined;
  let held = false;
  let first = true;
  for (const row of list) {
    const sequence = Number(row.sequence);
    if (row.previous_id === null) {
      if (sequence <= Number(row.delivered)) {
        hold(row, 'repeat');
        continue;
      }
      const expected = Math.max(Number(row.delivered), passedSequence) + 1;
      if (!held && sequence === expected && sequence !== previousSequence && row.withheld !== true) pass(row);
      else hold(row, first && sequence !== expected ? 'gap' : 'hold');
    } else if (!held && (!row.waits || row.previous_id === passedId) && row.withheld !== true) pass(row);
    else hold(row, 'hold');
    first = false;
    previousSequence = sequence;
    if (row.passed) {
      passedId = row.id;
      passedSequence = sequence;
    } else held = true;
  }
}

function bySequenceThenId(a: ClaimRow, b: ClaimRow): number {
  return Number(a.sequence) - Number(b.sequence) || Number(a.id) - Number(b.id);
}

function pass(row: ClaimedRow): void {
  row.gate = 'pass';
  row.passed = true;
}

function hold(row: ClaimedRow, gate: 'repeat' | 'gap' | 'hold'): void {
  row.gate = gate;
  row.passed = false;
  row.payload = null;
  row.payload_bytes = null;
}
