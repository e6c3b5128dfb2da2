import type { Pool, PoolClient } from 'pg';
import type { Logger } from '../logger.js';

/**
 * A sleep the relay can be woken from: by a NOTIFY, by `wake()` from the same
 * process, or by stop. A wake that arrives while the relay is busy is kept,
 * so the next sleep returns at once.
 */
export class Doorbell {
  private pending = false;
  private ring: (() => void) | undefined;

  wake(): void {
    this.pending = true;
    this.ring?.();
  }

  sleep(ms: number): Promise<void> {
    if (this.pending) {
      this.pending = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      const self = this;
      function done(): void {
        clearTimeout(timer);
        self.ring = undefined;
        self.pending = false;
        resolve();
      }
      this.ring = done;
    });
  }
}

/** Holds one connection that LISTENs on the wake-up channel; reconnects when it breaks. */
export class WakeListener {
  private client: PoolClient | undefined;
  private stopped = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private failures = 0;

  constructor(
    private readonly pool: Pool,
    private readonly channel: string,
    private readonly onWake: () => void,
    private readonly logger: Logger,
  ) {}

  start(): void {
    void this.connect();
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    let client: PoolClient | undefined;
    try {
      client = await this.pool.connect();
      this.attach(client);
      await client.query(`LISTEN "${this.channel}"`);
      if (this.stopped) {
        this.detach(client);
        client.release(true);
        return;
      }
      this.client = client;
      this.failures = 0;
      // Events may have committed while we were not listening.
      this.onWake();
    } catch (error) {
      if (client) this.broken(client, error);
      else this.retry(error);
    }
  }

  private readonly handlers = new WeakMap<PoolClient, { error: (e: Error) => void; notify: () => void }>();

  private attach(client: PoolClient): void {
    const h = { error: (e: Error) => this.broken(client, e), notify: () => this.onWake() };
    this.handlers.set(client, h);
    client.on('error', h.error);
    client.on('notification', h.notify);
  }

  private detach(client: PoolClient): void {
    const h = this.handlers.get(client);
    if (!h) return;
    client.removeListener('error', h.error);
    client.removeListener('notification', h.notify);
    this.handlers.delete(client);
  }

  private broken(client: PoolClient, error: unknown): void {
    if (this.client === client) this.client = undefined;
    this.detach(client);
    try {
      client.release(error instanceof Error ? error : true);
    } catch {
      // already released
    }
    this.retry(error);
  }

  private retry(error: unknown): void {
    if (this.stopped || this.retryTimer) return;
    this.failures += 1;
    const delay = Math.min(30_000, 250 * 2 ** Math.min(this.failures, 7));
    this.logger.warn(
      { err: error, retryInMs: delay },
      'wake-up listener lost its connection; polling meanwhile',
    );
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.connect();
    }, delay);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    const client = this.client;
    this.client = undefined;
    if (!client) return;
    try {
      await client.query(`UNLISTEN "${this.channel}"`);
      this.detach(client);
      client.release();
    } catch (error) {
      this.detach(client);
      client.release(error instanceof Error ? error : true);
    }
  }
}
