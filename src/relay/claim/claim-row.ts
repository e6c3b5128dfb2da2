import type { EventRow } from '../../core/event-row.js';
import type { HeldRow } from './hold-back.js';

/** What the ordering gate said of a claimed row (see {@link CLAIM_SQL}). */
export type Gate = 'pass' | 'hold' | 'gap' | 'repeat';

/** A row of the claim statement ({@link CLAIM_SQL}). */
export interface ClaimRow extends HeldRow, EventRow {
  /** The aggregate's delivered sequence as the claim saw it: greatest(delivered_sequence, sequence_base). */
  delivered: string;
  partition: number;
  /** Its aggregate has an event in flight: the claim did not send its payload, and it cannot pass. */
  withheld?: boolean;
  /** Null unless it passed the gate ({@link gateClaim} clears it). */
  payload: string | null;
  payload_bytes: Buffer | null;
}

/** A claimed row, gated ({@link gateClaim}); payloads are null unless it passed the gate. */
export interface ClaimedRow extends ClaimRow {
  gate: Gate;
  /** `gate = 'pass'`. */
  passed: boolean;
}
