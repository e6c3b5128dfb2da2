import { aggregateKeyOf } from '../../aggregate-key.js';
import { toMessage } from '../../core/event-row.js';
import type { OutboxMessage } from '../../core/message.js';
import type { PartitionLeases } from '../leases.js';
import type { RefusedAggregates } from '../outage.js';
import { bigintArray, textArray } from '../pg-array.js';
import type { RelaySession, Statement } from '../session.js';
import type { SourceBatch } from '../source.js';
import type { Stopwatch } from '../stats.js';
import { gateClaim } from './claim-gate.js';
import type { ClaimRow } from './claim-row.js';
import type { HoldBack } from './hold-back.js';
import type { SequenceFaults } from './sequence-faults.js';

/** Where each claim's scan starts (the polling source's scan floor). */
export interface ClaimFloor<S extends { readonly from: string } = { readonly from: string }> {
  start(partitions: readonly number[]): S;
  claimed(start: S, firstId: string | undefined, ms: number): void;
}

/** A claimed batch: the events that passed the gate, and the leases they were claimed under. */
export type Claimed = SourceBatch;

export interface ClaimerParts {
  readonly session: RelaySession;
  readonly statement: Statement;
  readonly relayId: string;
  readonly batchSize: number;
  readonly leases: Pick<PartitionLeases, 'snapshot'>;
  readonly holdBack: HoldBack;
  readonly refused: RefusedAggregates;
  readonly faults: SequenceFaults;
  readonly watch: Stopwatch;
  /** Where each claim's scan starts ({@link ScanFloor}); none: always at the beginning. */
  readonly floor?: ClaimFloor;
  /**
   * Asked at every claim: more ids to leave out and parameters after the eight (the CDC relay's
   * polling path: the ids its stream has in flight, and the polled aggregates, `$9`).
   */
  readonly scope?: () => { readonly exclude: readonly string[]; readonly values: readonly unknown[] };
}

/**
 * The claim step: the next due events of the partitions held, leaving out the ids still in
 * flight and the aggregates held back or refused; the rows that did not pass the gate are
 * handed to the hold-back, repeated sequences are marked dead, and a probe of the gaps held
 * past the grace is started in the background — see {@link SequenceFaults}.
 */
export class Claimer {
  constructor(private readonly p: ClaimerParts) {}

  async claim(exclude: readonly string[]): Promise<Claimed> {
    const p = this.p;
    const { partitions, epochs } = p.leases.snapshot();
    const client = await p.session.get();
    p.holdBack.claimStarting();
    const started = performance.now();
    const scope = p.scope?.();
    const start = p.floor?.start(partitions);
    const { rows: claimed } = await client.query<ClaimRow>({
      ...p.statement,
      values: [
        partitions,
        epochs,
        p.relayId,
        p.batchSize,
        bigintArray(scope ? [...exclude, ...scope.exclude] : exclude),
        textArray(p.holdBack.excluded(p.refused.waiting())),
        start?.from ?? '0',
        textArray(p.holdBack.inFlightKeys()),
        ...(scope?.values ?? []),
      ],
    });
    const ms = performance.now() - started;
    if (claimed.length > 0) p.watch.add(ms);
    const gates = gateClaim(claimed);
    const from = start === undefined ? undefined : BigInt(start.from);
    /** The lowest previous event below the scan's start that a held chained row waits for. */
    let reach: bigint | undefined;
    const messages: OutboxMessage[] = [];
    const held: ClaimRow[] = [];
    /** Every message passed is a chained event (see SourceBatch.chained). */
    let chained = true;
    const repeats: ClaimRow[] = [];
    for (let i = 0; i < claimed.length; i++) {
      const row = claimed[i]!;
      const gate = gates[i];
      if (gate === 'repeat') repeats.push(row);
      else if (gate !== 'pass') {
        // It waits for a previous event the scan started above (committed after the claims
        // passed its id; skipped by the floor), in the table and due (not in flight, or its row
        // would not have come back): the floor reaches back to it, and the aggregate is not held
        // back, so that the next claim finds it at once instead of at the next full scan.
        const previous = below(row, from);
        if (previous === undefined) held.push(row);
        else if (reach === undefined || previous < reach) reach = previous;
      }
      // Gated by sequence: a second event with a sequence this relay published or has in flight
      // (the claim's snapshot may predate that outcome). The next claim sees it, and marks this a
      // repeat. A chained row cannot repeat: it passed because its previous event had left.
      else if (
        row.previous_id === null &&
        p.holdBack.repeats(aggregateKeyOf(row.aggregate_type, row.aggregate_id), Number(row.sequence))
      )
        held.push(row);
      else {
        messages.push(toMessage(row));
        if (row.previous_id === null) chained = false;
      }
    }
    // A previous event reached for lies below the scan's start, so below its first row.
    if (start) p.floor?.claimed(start, reach === undefined ? claimed[0]?.id : reach.toString(), ms);
    const fence = { relayId: p.relayId, partitions, epochs };
    // A repeat holds nothing back: its aggregate's later events passed in this claim already.
    await p.faults.repeated(client, repeats, fence);
    if (held.length > 0) p.holdBack.hold(held);
    p.faults.observe(claimed, gates);
    // In the background: this batch does not wait for it.
    p.faults.probe(fence);
    return { messages, partitions, epochs, scanned: claimed.length, chained };
  }
}

/**
 * The previous event a held chained row waits for, when it lies below `from`, where the claim's
 * scan started; else undefined.
 */
function below(row: ClaimRow, from: bigint | undefined): bigint | undefined {
  if (from === undefined || row.previous_id === null || !row.waits || row.withheld === true) return undefined;
  const previous = BigInt(row.previous_id);
  return previous < from ? previous : undefined;
}
