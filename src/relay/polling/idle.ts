/** How long an idle relay keeps polling fast before it sleeps and asks for NOTIFY. */
export const SETTLE_MS = 50;
/** After asking for NOTIFY, one more look this much later, for commits that read the flag before. */
export const GRACE_MS = 10;

/** A sleep that a wake-up can cut short ({@link Doorbell}). */
export interface Sleeper {
  sleep(ms: number): Promise<void>;
}

/** The `sleeping` flag of the partitions held ({@link PartitionLeases.setSleeping}). */
export interface SleepingFlag {
  setSleeping(sleeping: boolean): Promise<void>;
}

/**
 * The polling cadence of an idle relay. Right after the last event the relay polls fast
 * (1, 2, 2, 2 … ms for SETTLE_MS), so steady low-rate traffic is picked up within
 * milliseconds without any NOTIFY. Then, when it LISTENs, it marks its partitions `sleeping`
 * (producers NOTIFY only then), claims once more, waits GRACE_MS for transactions that read
 * the flag before it was set, claims again, and sleeps until a wake-up or the poll interval.
 */
export class IdleCadence {
  #since = 0;
  #step = 1;
  #flagged = false;
  #graced = false;

  constructor(
    private readonly doorbell: Sleeper,
    private readonly flag: SleepingFlag,
    private readonly listen: boolean,
    private readonly pollIntervalMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** A claim found nothing: the next step of the cadence, no sleep longer than `untilRebalanceMs`. */
  async rest(untilRebalanceMs: number): Promise<void> {
    const now = this.now();
    if (this.#since === 0) {
      this.#since = now;
      this.#step = 1;
    }
    if (now - this.#since < SETTLE_MS) {
      await this.doorbell.sleep(Math.min(this.#step, untilRebalanceMs));
      this.#step = Math.min(this.#step * 2, 2);
      return;
    }
    if (this.listen && !this.#flagged) {
      await this.flag.setSleeping(true);
      this.#flagged = true;
      return;
    }
    if (this.#flagged && !this.#graced) {
      this.#graced = true;
      await this.doorbell.sleep(Math.min(GRACE_MS, untilRebalanceMs));
      return;
    }
    // Re-assert: a no-op unless partitions were acquired meanwhile.
    if (this.#flagged) await this.flag.setSleeping(true);
    await this.doorbell.sleep(Math.min(this.pollIntervalMs, untilRebalanceMs));
  }

  /** A claim found events: back to fast polling, and the partitions' flag cleared if it was set. */
  async awake(): Promise<void> {
    const flagged = this.#flagged;
    this.#since = 0;
    this.#step = 1;
    this.#flagged = false;
    this.#graced = false;
    if (flagged) await this.flag.setSleeping(false);
  }
}
