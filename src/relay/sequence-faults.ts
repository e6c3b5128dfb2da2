import type { PoolClient } from 'pg';
import { aggregateKeyOf } from '../aggregate-key.js';
import type { Logger } from '../logger.js';
import type { ClaimedRow } from './claim.js';
import type { GapWatch } from './gap-watch.js';
import type { HoldBack } from './hold-back.js';
import type { Statement } from './session.js';
import type { RelayCounters } from './stats.js';
import { MAX_ERROR_CHARS } from './verdicts.js';

/** An event BRIDGE_GAPS_SQL bridged. */
interface BridgedRow {
  readonly id: string;
  readonly event_id: string;
  readonly aggregate_type: string;
  readonly aggregate_id: string;
  readonly sequence: string;
  readonly delivered: string;
}

/** The leases a claim ran under: every write of the relay's is fenced by them. */
export interface Fence {
  readonly partitions: readonly number[];
  readonly epochs: readonly string[];
}

export interface SequenceFaultsParts {
  readonly relayId: string;
  readonly logger: Logger;
  readonly counters: RelayCounters;
  readonly watch: GapWatch;
  readonly holdBack: HoldBack;
  /** REPEAT_DEAD_SQL (sequence-faults-sql.ts). */
  readonly repeatDead: Statement;
  /** BRIDGE_GAPS_SQL (sequence-faults-sql.ts). */
  readonly bridgeGaps: Statement;
}

/** `last_error` of an event whose sequence repeats one already delivered: both numbers, and the fix. */
export function repeatReason(
  row: Pick<ClaimedRow, 'aggregate_type' | 'aggregate_id' | 'sequence'>,
  delivered: string,
): string {
  return (
    `sequence ${row.sequence} of ${row.aggregate_type}/${row.aggregate_id} repeats one already delivered ` +
    `(${delivered}): caller versions must rise by one per event; do not mix default and caller sequences ` +
    'in one aggregate. It was not published; `tx-outbox dead skip --no-publish` removes it'
  ).slice(0, MAX_ERROR_CHARS);
}

/**
 * Caller versions (`enqueue({ sequence })`) the producer could not check across transactions,
 * made safe and visible by the relay (docs/guarantees.md, Caller versions):
 * - a **repeat** (sequence at or below the aggregate's delivered one) goes dead at once, with a
 *   reason naming both numbers and the fix, without blocking its aggregate;
 * - a **gap** at an aggregate's head is bridged once it was held for the grace and a probe finds
 *   no earlier event of the aggregate in the table ({@link GapWatch} decides when to probe).
 * Runs on the claim's connection, right after the claim, fenced by the claim's epochs.
 */
export class SequenceFaults {
  constructor(private readonly p: SequenceFaultsParts) {}

  /** Marks the claim's repeats dead (`gate = 'repeat'`). */
  async repeated(client: PoolClient, rows: readonly ClaimedRow[], fence: Fence): Promise<void> {
    if (rows.length === 0) return;
    const p = this.p;
    const errors = rows.map((r) => repeatReason(r, r.delivered));
    const { rows: dead } = await client.query<{ id: string }>({
      ...p.repeatDead,
      values: [p.relayId, fence.partitions, fence.epochs, rows.map((r) => r.id), errors],
    });
    const marked = new Set(dead.map((d) => d.id));
    for (const [i, r] of rows.entries()) {
      if (!marked.has(r.id)) continue;
      p.logger.error(
        {
          relayId: p.relayId,
          eventId: r.event_id,
          aggregateType: r.aggregate_type,
          aggregateId: r.aggregate_id,
          sequence: Number(r.sequence),
          delivered: Number(r.delivered),
          error: errors[i],
        },
        'event is dead: its sequence repeats one already delivered; its aggregate carries on',
      );
    }
    p.counters.repeatsDead(marked.size);
  }

  /**
   * Tells the gap watch what the claim found: aggregates it passed an event of, and heads held
   * at a gap (`gate = 'gap'`) with nothing of their aggregate in flight or recorded during the
   * claim (an event in flight holds its successor back legitimately).
   */
  observe(rows: readonly ClaimedRow[]): void {
    const { watch, holdBack } = this.p;
    const heads = [];
    for (const r of rows) {
      if (r.gate === 'pass') watch.passed(aggregateKeyOf(r.aggregate_type, r.aggregate_id));
      else if (r.gate === 'gap') {
        const key = aggregateKeyOf(r.aggregate_type, r.aggregate_id);
        if (!holdBack.busy(key)) heads.push({ key, id: r.id, partition: r.partition });
      }
    }
    if (heads.length > 0) watch.held(heads);
  }

  /** Probes the heads due, one statement per partition; a bridged aggregate is claimable at once. */
  async bridge(client: PoolClient, fence: Fence): Promise<void> {
    const p = this.p;
    const due = p.watch.due(fence.partitions);
    for (const [partition, heads] of due) {
      const epoch = fence.epochs[fence.partitions.indexOf(partition)];
      let rows: BridgedRow[];
      try {
        ({ rows } = await client.query<BridgedRow>({
          ...p.bridgeGaps,
          values: [p.relayId, partition, epoch, heads.map((h) => h.id)],
        }));
      } catch (error) {
        // A probe that fails (a relay role without the sequence_base grant, a statement
        // timeout) must not stop delivery: the heads wait for the next probe. A broken
        // connection fails the next claim, which the loop handles.
        p.logger.warn(
          { err: error, relayId: p.relayId, partition, heads: heads.length },
          'gap probe failed; trying again later',
        );
        for (const h of heads) p.watch.missed(h.key);
        continue;
      }
      const bridged = new Set<string>();
      for (const r of rows) {
        const key = aggregateKeyOf(r.aggregate_type, r.aggregate_id);
        bridged.add(key);
        p.logger.warn(
          {
            relayId: p.relayId,
            eventId: r.event_id,
            aggregateType: r.aggregate_type,
            aggregateId: r.aggregate_id,
            expected: Number(r.delivered) + 1,
            found: Number(r.sequence),
            heldMs: p.watch.heldFor(key),
          },
          'sequence gap bridged: nothing earlier of the aggregate is left; publishing across it (sequencebase = found - 1)',
        );
        p.watch.bridged(key);
        p.holdBack.release(key);
      }
      for (const h of heads) if (!bridged.has(h.key)) p.watch.missed(h.key);
      p.counters.gapsBridged(rows.length);
    }
  }
}
