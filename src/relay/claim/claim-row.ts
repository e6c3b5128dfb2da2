import type { EventRow } from '../../core/event-row.js';
import type { HeldRow } from './hold-back.js';

/** What the ordering gate said of a claimed row (see {@link CLAIM_SQL}). */
export type Gate = 'pass' | 'hold' | 'gap' | 'repeat';

/** A row of the claim statement ({@link CLAIM_SQL}). */
export interface ClaimRow extends HeldRow, EventRow {
  /**
   * The row id of its aggregate's previous event (`'0'`: none), or null: gated by sequence
   * (written before migration 15, a caller version, a WAL-mode event handed over, …).
   */
  previous_id: string | null;
  /** The previous event (`previous_id`) was still in the table when the claim read it. */
  waits: boolean;
  /**
   * Gated by sequence only (`previous_id` null): the aggregate's delivered sequence as the claim
   * saw it, greatest(delivered_sequence, sequence_base). Null for the other rows.
   */
  delivered: string | null;
  partition: number;
  /** Its aggregate has an event in flight: the claim did not send its payload, and it cannot pass. */
  withheld?: boolean;
  /** Dropped (null) by the gate unless the row passes. */
  payload: string | null;
  payload_bytes: Buffer | null;
}
