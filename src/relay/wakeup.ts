import type { Pool } from 'pg';
import type { Logger } from '../logger.js';
import { Checkout } from '../schema/checkout.js';

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
  private lease: Checkout | undefined;
  private stopped = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private failures = 0;
  private readonly notify = (): void => this.onWake();

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
    let lease: Checkout | undefined;
    try {
      lease = await Checkout.of(this.pool, (error) => {
        if (lease) this.broken(lease, error);
      });
      lease.client.on('notification', this.notify);
      await lease.client.query(`LISTEN "${this.channel}"`);
      if (this.stopped) {
        this.drop(lease, true);
        return;
      }
      this.lease = lease;
      this.failures = 0;
      // Events may have committed while we were not listening.
      this.onWake();
    } catch (error) {
      if (lease) this.broken(lease, error);
      else this.retry(error);
    }
  }

  /** Stops listening on `lease`'s client and gives it back (destroyed when `error` is given). */
  private drop(lease: Checkout, error?: unknown): void {
    if (this.lease === lease) this.lease = undefined;
    lease.client.removeListener('notification', this.notify);
    lease.release(error);
  }

  private broken(lease: Checkout, error: unknown): void {
    this.drop(lease, error ?? true);
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
    const lease = this.lease;
    if (!lease) return;
    try {
      await lease.client.query(`UNLISTEN "${this.channel}"`);
      this.drop(lease);
    } catch (error) {
      this.drop(lease, error ?? true);
    }
  }
}
