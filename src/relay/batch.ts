import type { OutboxMessage } from '../core/message.js';

/**
 * A batch a source hands the loop: the events to publish, in the source's order, and the
 * leases (the fence) they were read under — every write that settles them is fenced by these.
 */
export interface SourceBatch {
  readonly messages: OutboxMessage[];
  /** Rows or events the source looked at for it, including those it held back. */
  readonly scanned: number;
  readonly partitions: number[];
  readonly epochs: string[];
  /**
   * Every message is a chained event (its row names its aggregate's previous event): delivered,
   * it needs no progress write, and the outcome statement can be the lean one
   * (RECORD_CHAINED_DELIVERED_SQL). Unset: not known (the full statement).
   */
  readonly chained?: boolean;
}
