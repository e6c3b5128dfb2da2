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
}
