import type { PoolClient } from 'pg';
import { aggregateKeyOf } from '../../aggregate-key.js';
import type { Fence } from '../../core/fence.js';
import type { Logger } from '../../logger.js';
import type { RelaySession, Statement } from '../session.js';
import type { RelayCounters } from '../stats.js';
import { MAX_ERROR_CHARS } from '../verdicts.js';
import type { ClaimRow, Gate } from './claim-row.js';
import type { GapHead, GapWatch } from './gap-watch.js';
import type { HoldBack } from './hold-back.js';

/** An event BRIDGE_GAPS_SQL bridged. */
interface BridgedRow {
  readonly id: string;
  readonly event_id: string;
  readonly aggregate_type: string;
  readonly aggregate_id: string;
  readonly sequence: string;
  readonly delivered: string;
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
  /** The probes' own connection: a probe never waits for a claim, nor a claim for a probe. */
  readonly probeSession: RelaySession;
}

/** `last_error` of an event whose sequence repeats one already delivered: both numbers, and the fix. */
export function repeatReason(
  row: Pick<ClaimRow, 'aggregate_type' | 'aggregate_id' | 'sequence'>,
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
 * Repeats are marked on the claim's connection, right after the claim (one statement by primary
 * key, only when the claim found some). Probes run in the background on a connection of their
 * own, one at a time, at most once a second for the whole relay: a batch ready to publish never
 * waits for one. Every write is fenced by the claim's epochs.
 */
export class SequenceFaults {
  /** The probe under way, if any. */
  #probing: Promise<void> | undefined;
  #stopping = false;

  constructor(private readonly p: SequenceFaultsParts) {}

  /** Marks the claim's repeats dead (`gate = 'repeat'`). */
  async repeated(client: PoolClient, rows: readonly ClaimRow[], fence: Fence): Promise<void> {
    if (rows.length === 0) return;
    const p = this.p;
    const errors = rows.map((r) => repeatReason(r, r.delivered ?? '0'));
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
  observe(rows: readonly ClaimRow[], gates: readonly Gate[]): void {
    const { watch, holdBack } = this.p;
    const heads = [];
    for (let i = 0; i < rows.length; i++) {
      const r = rows[i]!;
      // No head held at a gap (the common case): nothing to clear, no key to build.
      if (gates[i] === 'pass') {
        if (watch.size > 0) watch.passed(aggregateKeyOf(r.aggregate_type, r.aggregate_id));
      } else if (gates[i] === 'gap') {
        const key = aggregateKeyOf(r.aggregate_type, r.aggregate_id);
        if (!holdBack.busy(key)) heads.push({ key, id: r.id, partition: r.partition });
      }
    }
    if (heads.length > 0) watch.held(heads);
  }

  /**
   * Starts a probe of the heads due, unless one is under way: one statement for all their
   * partitions, in the background (see {@link stopped}). A bridged aggregate is claimable at once.
   */
  probe(fence: Fence): void {
    if (this.#probing || this.#stopping) return;
    const due = this.p.watch.due(fence.partitions);
    if (due.size === 0) return;
    const partitions = [...due.keys()];
    const epochs = partitions.map((partition) => fence.epochs[fence.partitions.indexOf(partition)]!);
    const heads = [...due.values()].flat();
    this.#probing = this.#bridge(heads, { relayId: fence.relayId, partitions, epochs }).finally(() => {
      this.#probing = undefined;
    });
  }

  /**
   * The relay stops: waits for the probe under way, up to `timeoutMs` (a probe waits on row
   * locks, e.g. an operator's open `dead skip`), then gives its connection back — destroyed
   * when the probe is still running, which ends it.
   */
  async stopped(timeoutMs: number): Promise<void> {
    this.#stopping = true;
    const probing = this.#probing;
    let timer: NodeJS.Timeout | undefined;
    const late = probing
      ? await Promise.race([
          probing.then(() => false),
          new Promise<boolean>((resolve) => {
            timer = setTimeout(() => resolve(true), timeoutMs);
          }),
        ])
      : false;
    clearTimeout(timer);
    await this.p.probeSession.release(late ? new Error('relay stopped during a gap probe') : undefined);
  }

  /** One probe. Never rejects. */
  async #bridge(heads: readonly GapHead[], fence: Fence): Promise<void> {
    const p = this.p;
    let rows: BridgedRow[];
    try {
      // Borrowed for the one statement and given back, as the lease renewals' connection is: the
      // relay's pool may have no connection to spare for long (max 4: claims, outcomes, LISTEN,
      // and one borrowed in turn), and a connection held here would starve the renewals.
      const client = await p.probeSession.get();
      if (this.#stopping) {
        // The connection came only as the relay stopped (others were given back): return it, or
        // the pool's end() would wait for it forever.
        await p.probeSession.release();
        return;
      }
      ({ rows } = await client.query<BridgedRow>({
        ...p.bridgeGaps,
        values: [p.relayId, fence.partitions, fence.epochs, heads.map((h) => h.id)],
      }));
      await p.probeSession.release();
    } catch (error) {
      // A probe that fails (a relay role without the sequence_base grant, a statement
      // timeout, a lost connection) must not stop delivery: the heads wait for the next
      // probe, on a new connection.
      p.logger.warn(
        { err: error, relayId: p.relayId, partitions: fence.partitions, heads: heads.length },
        'gap probe failed; trying again later',
      );
      for (const h of heads) p.watch.missed(h.key);
      await p.probeSession.release(error ?? true);
      return;
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
