import type { Pool, PoolClient } from 'pg';
import type { Logger } from '../logger.js';
import { Checkout } from '../schema/checkout.js';
import { withSchema } from '../schema/identifiers.js';
import type { Statement } from '../schema/statement.js';

/** The one statement type (src/schema/statement.ts), re-exported for the relay's files. */
export type { Statement };

/**
 * One pooled connection the relay keeps for a statement family (claims, or
 * outcomes), with the relay's session settings. A broken connection is
 * dropped and the next call opens a new one.
 */
export class RelaySession {
  private lease: Checkout | undefined;
  private readonly onError: (error: Error) => void;

  constructor(
    private readonly pool: Pool,
    private readonly settings: string,
    private readonly logger: Logger,
    private readonly label: string,
  ) {
    // An idle checked-out client that loses its connection emits 'error'; the next query fails and reconnects.
    this.onError = (error) => this.logger.warn({ err: error, session: this.label }, 'relay connection error');
  }

  async get(): Promise<PoolClient> {
    if (this.lease) return this.lease.client;
    const lease = await Checkout.of(this.pool, this.onError);
    try {
      await lease.client.query(this.settings);
    } catch (error) {
      lease.release(error ?? true);
      throw error;
    }
    this.lease = lease;
    return lease.client;
  }

  /** Gives the connection back: destroyed after an error, reset otherwise. */
  async release(error?: unknown): Promise<void> {
    const lease = this.lease;
    this.lease = undefined;
    if (!lease) return;
    if (error !== undefined || lease.broken) {
      lease.release(error);
      return;
    }
    try {
      await lease.client.query('RESET ALL');
      lease.release();
    } catch (e) {
      lease.release(e ?? true);
    }
  }
}

/**
 * `sql` for the outbox schema, named `txo_<family>_<schema>` (prepared once per connection) so
 * each schema has its own.
 */
export function relayStatement(family: string, sql: string, schema: string, quotedSchema: string): Statement {
  return { name: `txo_${family}_${schema.replace(/[^a-z0-9_]/g, '')}`, text: withSchema(sql, quotedSchema) };
}

/**
 * The relay's session settings. The claim must walk the primary key in id order whatever the
 * (churning) statistics say: a bitmap or sequential scan plus sort would cost time in
 * proportion to the backlog. The same holds the gap probe (BRIDGE_GAPS_SQL) to its primary-key
 * range, the rows ahead of its heads. No JIT: the relay's statements are short, and a plan
 * priced by `enable_seqscan = off` (PostgreSQL 17 and older add 10^10 to a sequential scan)
 * lies far above `jit_above_cost`: it would be compiled on every run, for nothing.
 */
export function relaySessionSettings(synchronousCommit: 'on' | 'off'): string {
  return `SET synchronous_commit = ${synchronousCommit}; SET enable_seqscan = off; SET enable_bitmapscan = off; SET jit = off`;
}
