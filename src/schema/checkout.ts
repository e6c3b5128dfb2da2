import type { Pool, PoolClient } from 'pg';

/**
 * A client checked out of a pool, with an `'error'` listener for as long as it is out.
 *
 * node-postgres emits `'error'` on a client whose connection ends (a database restart,
 * `pg_terminate_backend`, a proxy closing the socket), and pg-pool takes its own listener off
 * while the client is checked out: without one, that event ends the process. With it, the call
 * using the client still fails (its next query rejects), and `release` destroys the broken client
 * instead of pooling it. Every place that holds a checked-out client goes through here.
 */
export class Checkout {
  #broken: Error | undefined;
  #released = false;
  readonly #onError: (error: Error) => void;

  private constructor(
    readonly client: PoolClient,
    onError: ((error: Error) => void) | undefined,
  ) {
    this.#onError = (error) => {
      this.#broken ??= error;
      onError?.(error);
    };
    client.on('error', this.#onError);
  }

  /** Checks a client out of `pool`; `onError` also hears its connection's end (e.g. to reconnect). */
  static async of(pool: Pool, onError?: (error: Error) => void): Promise<Checkout> {
    return new Checkout(await pool.connect(), onError);
  }

  /** The error the connection ended with, once it has. */
  get broken(): Error | undefined {
    return this.#broken;
  }

  /** Gives the client back to the pool; destroyed instead when `error` is given or the connection broke. Idempotent. */
  release(error?: unknown): void {
    if (this.#released) return;
    this.#released = true;
    this.client.removeListener('error', this.#onError);
    const cause = error ?? this.#broken;
    if (cause === undefined) this.client.release();
    else this.client.release(cause instanceof Error ? cause : true);
  }
}
