import type { RelayHealth } from './health.js';
import type { RelayStats } from './stats.js';

export type { RelayHealth } from './health.js';
export type { RelayStats, Timing } from './stats.js';

/** A relay, whatever its source: the polling relay ({@link createRelay}) and the CDC relay. */
export interface Relay {
  readonly id: string;
  /** Starts the loop; idempotent. Resolves once the relay is running. */
  start(): Promise<void>;
  /**
   * Finishes the batch in flight (up to `timeout` ms, then aborts it), gives back the leases,
   * and closes the publisher (unless `closePublisher: false`); idempotent. Nothing of the
   * relay's keeps the process alive afterwards (the pool is yours to end).
   */
  stop(options?: { timeout?: number }): Promise<void>;
  /** Wakes an idle relay at once, e.g. right after a commit in the same process. */
  wake(): void;
  stats(): RelayStats;
  /** Running, partitions held, broker outage: what `/readyz` judges (see `serveMetrics`). */
  health(): RelayHealth;
}
