/**
 * A point-in-time view of an outbox: backlog, failures, partition owners and live relays,
 * read at a cost of O(partitions) (src/ops/backlog.ts). Ages come from the database clock
 * (`now()`), never this host's.
 */

import type { Pool } from 'pg';
import { type Backlog, type PartitionBacklog, readBacklog } from './backlog.js';

export type { RelayInstanceStatus } from './backlog.js';

/** One outbox partition: its lease and its share of the backlog. */
export type PartitionStatus = PartitionBacklog;

/**
 * The state of one outbox schema, see {@link outboxStatus}. `exact` says whether the counts
 * are exact or estimated from the head sample (see {@link Backlog}).
 */
export type OutboxStatus = Backlog;

export interface OutboxStatusOptions {
  /** Outbox schema. Default `outbox`. */
  readonly schema?: string;
  /**
   * Count every event instead of estimating: a scan of the whole events table (seconds at
   * millions of rows). Default false: the answer costs O(partitions) and says `exact` when
   * the table is smaller than the sample.
   */
  readonly exact?: boolean;
}

/**
 * Reads the status of the outbox in `schema`: one bounded query (two with `exact`).
 *
 * @throws OutboxValidationError when the schema name is invalid.
 * @throws OutboxError `TXO_NO_SCHEMA` when the outbox tables are not there (run `tx-outbox migrate`).
 */
export function outboxStatus(pool: Pool, options: OutboxStatusOptions = {}): Promise<OutboxStatus> {
  return readBacklog(pool, { schema: options.schema, exact: options.exact });
}
