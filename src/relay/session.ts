import type { Pool, PoolClient } from 'pg';
import type { Logger } from '../logger.js';

/**
 * One pooled connection the relay keeps for a statement family (claims, or
 * outcomes), with the relay's session settings. A broken connection is
 * dropped and the next call opens a new one.
 */
export class RelaySession {
  private client: PoolClient | undefined;
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
    if (this.client) return this.client;
    const client = await this.pool.connect();
    client.on('error', this.onError);
    try {
      await client.query(this.settings);
    } catch (error) {
      client.removeListener('error', this.onError);
      client.release(error instanceof Error ? error : true);
      throw error;
    }
    this.client = client;
    return client;
  }

  /** Gives the connection back: destroyed after an error, reset otherwise. */
  async release(error?: unknown): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (!client) return;
    client.removeListener('error', this.onError);
    if (error !== undefined) {
      client.release(error instanceof Error ? error : true);
      return;
    }
    try {
      await client.query('RESET ALL');
      client.release();
    } catch (e) {
      client.release(e instanceof Error ? e : true);
    }
  }
}
