import { OutboxError } from '../errors.js';
import type { Failure } from '../relay/verdicts.js';
import type { StreamEvent } from './stream-batch.js';

/** A WAL-mode event going into the table: failed (its attempt recorded) or pending behind one. */
export interface HandoverRow {
  readonly event: StreamEvent;
  readonly failure?: Failure;
  /**
   * Written after the stream session began (never streamed before, not a replay): the row is
   * written even at or below the aggregate's progress, and P marks such a repeat dead.
   */
  readonly fresh?: boolean;
}

/** Where an aggregate leaves the stream: delivered up to `delivered`, blocked per `blockMs`. */
export interface ProgressRow {
  readonly key: string;
  readonly delivered: number;
  /** null: unchanged; -1: for good (dead); else ms from now. */
  readonly blockMs: number | null;
}

/** Thrown when a write found the epochs raised: another relay took over. */
export class FencedError extends OutboxError {
  constructor() {
    super('the partition leases were taken over: this relay stops streaming', { code: 'TXO_CDC_FENCED' });
  }
}
