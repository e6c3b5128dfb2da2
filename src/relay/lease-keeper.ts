import type { Logger } from '../logger.js';

/** What the keeper drives: {@link PartitionLeases}. */
export interface KeptLeases {
  renew(): Promise<void>;
  /** Resolves to true while the relay holds less than its fair share. */
  rebalance(): Promise<boolean>;
}

export interface LeaseKeeperParts {
  readonly leases: KeptLeases;
  readonly leaseMs: number;
  /** Rebalance too (the polling relay's fair share); false: renew only (the CDC relay's own standby rebalances). */
  readonly rebalance: boolean;
  /** A renewal ran; `error` when it failed (logged already). Never rejects. */
  readonly renewed: (error: unknown) => Promise<void>;
  readonly logger: Logger;
  readonly relayId: string;
}

/** Renewal interval, and the rebalance interval: every third of the lease, at least 100 ms. */
export function leaseRoundMs(leaseMs: number): number {
  return Math.max(100, Math.floor(leaseMs / 3));
}

/** How soon a relay short of its fair share (leases of a crashed relay expiring) looks again. */
export const SHORT_ROUND_MS = 500;

/**
 * Keeps the partition leases in the background of the relay loop, so a batch never waits for a
 * lease statement: a round every third of the lease (at once on start; within 500 ms while the
 * relay holds less than its share) renews, then rebalances. Renewal and rebalance each run one
 * at a time, and a rebalance still under way (slow, blocked) never delays the next renewal.
 */
export class LeaseKeeper {
  readonly everyMs: number;
  readonly #p: LeaseKeeperParts;
  #timer: NodeJS.Timeout | undefined;
  #renewing: Promise<void> | undefined;
  #balancing: Promise<void> | undefined;
  #stopped = false;

  constructor(p: LeaseKeeperParts) {
    this.#p = p;
    this.everyMs = leaseRoundMs(p.leaseMs);
  }

  /** The first round now, then every interval. */
  start(): void {
    this.#round();
  }

  /** A round now (after a loop error), unless one is under way. */
  asap(): void {
    if (this.#stopped || this.#renewing) return;
    this.#round();
  }

  /** No more rounds (the one under way finishes on its own; the final release waits for it). */
  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
  }

  #round(): void {
    clearTimeout(this.#timer);
    if (this.#stopped) return;
    this.#arm(this.everyMs);
    this.#renewing ??= this.#renew().finally(() => {
      this.#renewing = undefined;
    });
    const renewing = this.#renewing;
    // After the renewal (the first one registers the relay), unless one is still under way.
    if (this.#p.rebalance)
      this.#balancing ??= renewing
        .then(() => this.#rebalance())
        .finally(() => {
          this.#balancing = undefined;
        });
  }

  #arm(ms: number): void {
    clearTimeout(this.#timer);
    if (!this.#stopped) this.#timer = setTimeout(() => this.#round(), ms);
  }

  async #renew(): Promise<void> {
    let failure: unknown;
    try {
      await this.#p.leases.renew();
    } catch (error) {
      failure = error;
      this.#p.logger.warn({ err: error, relayId: this.#p.relayId }, 'lease renewal failed');
    }
    await this.#p.renewed(failure).catch((error: unknown) => {
      this.#p.logger.warn({ err: error, relayId: this.#p.relayId }, 'after the lease renewal');
    });
  }

  async #rebalance(): Promise<void> {
    try {
      // Short of the share: look again soon (leases of a crashed relay expire).
      if (await this.#p.leases.rebalance()) this.#arm(Math.min(SHORT_ROUND_MS, this.everyMs));
    } catch (error) {
      this.#p.logger.warn({ err: error, relayId: this.#p.relayId }, 'lease rebalance failed; retrying');
      this.#arm(Math.min(SHORT_ROUND_MS, this.everyMs));
    }
  }
}
