/**
 * When the relay renews and rebalances its partition leases: renewal every third of the
 * lease (at least 100 ms) on a timer; rebalance from the loop, between batches, as often,
 * or within 500 ms while the relay holds less than its share (as leases of a crashed relay
 * expire), and at once after a loop error.
 */
export class LeaseSchedule {
  /** Renewal interval, and the rebalance interval. */
  readonly everyMs: number;
  #next = 0;

  constructor(
    leaseMs: number,
    private readonly now: () => number = Date.now,
  ) {
    this.everyMs = Math.max(100, Math.floor(leaseMs / 3));
  }

  /** The loop should rebalance before its next claim. */
  get due(): boolean {
    return this.now() >= this.#next;
  }

  /** Ms until the next rebalance (0 when due). */
  untilDue(): number {
    return Math.max(0, this.#next - this.now());
  }

  /** A rebalance ran; `short` when the relay still holds less than its fair share. */
  rebalanced(short: boolean): void {
    this.#next = this.now() + (short ? Math.min(this.everyMs, 500) : this.everyMs);
  }

  /** Rebalance before the next claim (after a loop error). */
  asap(): void {
    this.#next = 0;
  }
}
