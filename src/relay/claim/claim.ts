import { aggregateKeyOf } from '../../aggregate-key.js';
import type { OutboxMessage } from '../../publishers/contract.js';
import type { PartitionLeases } from '../leases.js';
import type { RefusedAggregates } from '../outage.js';
import type { RelaySession, Statement } from '../session.js';
import type { SourceBatch } from '../source.js';
import type { Stopwatch } from '../stats.js';
import { gateClaim } from './claim-gate.js';
import type { HeldRow, HoldBack } from './hold-back.js';
import type { SequenceFaults } from './sequence-faults.js';

/** Where each claim's scan starts (the polling source's scan floor). */
export interface ClaimFloor<S extends { readonly from: string } = { readonly from: string }> {
  start(partitions: readonly number[]): S;
  claimed(start: S, firstId: string | undefined, ms: number): void;
}

/** What the ordering gate said of a claimed row (see {@link CLAIM_SQL}). */
export type Gate = 'pass' | 'hold' | 'gap' | 'repeat';

/** A row of the claim statement ({@link CLAIM_SQL}). */
export interface ClaimRow extends HeldRow {
  /** The aggregate's delivered sequence as the claim saw it: greatest(delivered_sequence, sequence_base). */
  delivered: string;
  id: string;
  event_id: string;
  partition: number;
  sequence: string;
  /** Its aggregate has an event in flight: the claim did not send its payload, and it cannot pass. */
  withheld?: boolean;
  /** Absent only in rows of tests written before migration 006. */
  sequence_base?: string;
  event_type: string;
  schema_version: number;
  topic: string | null;
  payload: string | null;
  payload_bytes: Buffer | null;
  headers: string;
  created_at: Date;
  deliver_after: Date | null;
  attempts: number;
}

/** A claimed row, gated ({@link gateClaim}); payloads are null unless it passed the gate. */
export interface ClaimedRow extends ClaimRow {
  gate: Gate;
  /** `gate = 'pass'`. */
  passed: boolean;
}

/** A claimed batch: the events that passed the gate, and the leases they were claimed under. */
export type Claimed = SourceBatch;

/** The message a publisher gets for a claimed row. */
export function toMessage(row: ClaimedRow): OutboxMessage {
  const bytes = row.payload_bytes;
  const sequenceBase = Number(row.sequence_base ?? 0);
  return {
    id: row.id,
    eventId: row.event_id,
    aggregateType: row.aggregate_type,
    aggregateId: row.aggregate_id,
    sequence: Number(row.sequence),
    ...(sequenceBase > 0 ? { sequenceBase } : {}),
    type: row.event_type,
    schemaVersion: row.schema_version,
    topic: row.topic,
    payload: bytes ?? Buffer.from(row.payload ?? 'null'),
    contentType: bytes ? 'application/octet-stream' : 'application/json',
    headers: JSON.parse(row.headers) as Record<string, string>,
    createdAt: row.created_at,
    ...(row.deliver_after ? { deliverAfter: row.deliver_after } : {}),
    attempts: row.attempts,
  };
}

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
        scope ? [...exclude, ...scope.exclude] : exclude,
        p.holdBack.excluded(p.refused.waiting()),
        start?.from ?? '0',
        p.holdBack.inFlightKeys(),
        ...(scope?.values ?? []),
      ],
    });
    const ms = performance.now() - started;
    if (start) p.floor?.claimed(start, claimed[0]?.id, ms);
    if (claimed.length > 0) p.watch.add(ms);
    const rows = gateClaim(claimed);
    const messages: OutboxMessage[] = [];
    const held: ClaimedRow[] = [];
    const repeats: ClaimedRow[] = [];
    for (const row of rows) {
      if (row.gate === 'repeat') repeats.push(row);
      else if (row.gate !== 'pass') held.push(row);
      // A second event with a sequence this relay published or has in flight: the claim's
      // snapshot may predate that outcome. The next claim sees it, and marks this a repeat.
      else if (p.holdBack.repeats(aggregateKeyOf(row.aggregate_type, row.aggregate_id), Number(row.sequence)))
        held.push(row);
      else messages.push(toMessage(row));
    }
    const fence = { partitions, epochs };
    // A repeat holds nothing back: its aggregate's later events passed in this claim already.
    await p.faults.repeated(client, repeats, fence);
    if (held.length > 0) p.holdBack.hold(held);
    p.faults.observe(rows);
    // In the background: this batch does not wait for it.
    p.faults.probe(fence);
    return { messages, partitions, epochs, scanned: rows.length };
  }
}
