import { aggregateKeyOf } from '../../aggregate-key.js';
import type { ClaimedRow, ClaimRow } from './claim-row.js';

/**
 * The ordering gate's claim half, over one claim's rows (id order, each with its aggregate's
 * delivered sequence as the claim's snapshot saw it; see CLAIM_SQL). Default sequences are
 * gap-free and an aggregate's events leave the table from the front, so the events of one
 * aggregate still in the table are exactly sequences delivered+1, delivered+2, …
 * - An event passes (`'pass'`) only when it and every earlier event of its aggregate are in the
 *   batch: its rank among the batch's events of that aggregate (by sequence, then id) equals its
 *   distance from the delivered sequence, and no sequence up to it comes twice.
 * - Caller versions (`enqueue({ sequence })`) are checked by the producer within one call only.
 *   An event at or below delivered is a repeat (`'repeat'`): it can never be published in order,
 *   so it takes no rank among its aggregate's other events (it holds nothing back) and the relay
 *   marks it dead (REPEAT_DEAD_SQL). An aggregate whose lowest claimable event is above
 *   delivered+1 is held at a gap (`'gap'`): after a grace the relay probes for an earlier event
 *   and, finding none, bridges it (BRIDGE_GAPS_SQL). Other rows held back are `'hold'`.
 * A row of an aggregate with an event in flight (`withheld`: the claim sent no payload) is held
 * even where the rule would pass it (that event's outcome landed just before the claim began);
 * the next claim sees it again. Rows are gated in place (no copy); the payloads of rows that do
 * not pass are dropped.
 */
export function gateClaim(rows: readonly ClaimRow[]): ClaimedRow[] {
  const gated = rows as ClaimedRow[];
  // The rows of each aggregate that are not repeats, in id order (the claim's order).
  const byAggregate = new Map<string, ClaimedRow[]>();
  for (const row of gated) {
    const sequence = Number(row.sequence);
    if (sequence <= Number(row.delivered)) {
      hold(row, 'repeat');
      continue;
    }
    const key = aggregateKeyOf(row.aggregate_type, row.aggregate_id);
    const list = byAggregate.get(key);
    if (list) list.push(row);
    else byAggregate.set(key, [row]);
  }
  for (const list of byAggregate.values()) {
    if (list.length === 1) {
      const row = list[0]!;
      if (Number(row.sequence) !== Number(row.delivered) + 1) hold(row, 'gap');
      else if (row.withheld === true) hold(row, 'hold');
      else pass(row);
      continue;
    }
    list.sort(bySequenceThenId);
    let distinct = 0;
    let previous: number | undefined;
    let passing = true;
    for (let rank = 1; rank <= list.length; rank++) {
      const row = list[rank - 1]!;
      const sequence = Number(row.sequence);
      if (sequence !== previous) distinct += 1;
      previous = sequence;
      // Once one row of the aggregate is held, every later one is: its rank counts the held row.
      passing = passing && sequence === Number(row.delivered) + rank && rank === distinct;
      if (passing && row.withheld !== true) pass(row);
      else hold(row, rank === 1 && !passing ? 'gap' : 'hold');
    }
  }
  return gated;
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
