import type { Pool, PoolClient } from 'pg';
import type { Logger } from '../logger.js';
import { Checkout } from '../schema/checkout.js';

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
