/** How long an idle relay keeps polling fast before it sleeps and asks for NOTIFY. */
export const SETTLE_MS = 50;
/** The fast polling's sleep between two claims that found nothing. */
export const FAST_POLL_MS = 1;
/** After asking for NOTIFY, one more look this much later, for commits that read the flag before. */
export const GRACE_MS = 10;

/** A sleep that a wake-up can cut short ({@link Doorbell}). */
export interface Sleeper {
  sleep(ms: number): Promise<void>;
}

/** The `sleeping` flag of the partitions held ({@link PartitionLeases.setSleeping}). */
export interface SleepingFlag {
  setSleeping(sleeping: boolean): Promise<void>;
  /** Raised whenever partitions are acquired (their flag starts cleared). */
  readonly acquisitions: number;
}

/**
 * The polling cadence of an idle relay. Right after the last event the relay polls fast
 * (every 1 ms for SETTLE_MS), so steady low-rate traffic is picked up within a millisecond or
 * two without any NOTIFY. Then, when it LISTENs, it marks its partitions `sleeping`
 * (producers NOTIFY only then), claims once more, waits GRACE_MS for transactions that read
 * the flag before it was set, claims again, and sleeps until a wake-up or the poll interval,
 * claiming once per interval (for what no NOTIFY announces: a retry or a scheduled event come
 * due, a NOTIFY lost with its connection). The flag is written again only for partitions
 * acquired since it was set.
 */
export class IdleCadence {
  #since = 0;
  #flagged = false;
  #graced = false;
  /** The flag's acquisitions count when the flag was last written. */
  #flaggedAt = 0;

  constructor(
    private readonly doorbell: Sleeper,
    private readonly flag: SleepingFlag,
    private readonly listen: boolean,
    private readonly pollIntervalMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** A claim found nothing: the next step of the cadence. */
  async rest(): Promise<void> {
    const now = this.now();
    if (this.#since === 0) this.#since = now;
    if (now - this.#since < SETTLE_MS) {
      await this.doorbell.sleep(FAST_POLL_MS);
      return;
    }
    if (this.listen && !this.#flagged) {
      this.#flaggedAt = this.flag.acquisitions;
      await this.flag.setSleeping(true);
      this.#flagged = true;
      return;
    }
    if (this.#flagged && !this.#graced) {
      this.#graced = true;
      await this.doorbell.sleep(GRACE_MS);
      return;
    }
    // Partitions acquired since the flag was written: theirs is cleared; set it (and look again).
    if (this.#flagged && this.flag.acquisitions !== this.#flaggedAt) {
      this.#flaggedAt = this.flag.acquisitions;
      await this.flag.setSleeping(true);
      this.#graced = false;
      return;
    }
    await this.doorbell.sleep(this.pollIntervalMs);
  }

  /**
   * A claim found events: back to fast polling, and the partitions' flag cleared if it was set.
   * The batch does not wait for that write (a flag left set only costs producers a NOTIFY; a
   * failed write is tried again at the next wake-up).
   */
  awake(): void {
    const flagged = this.#flagged;
    this.#since = 0;
    this.#flagged = false;
    this.#graced = false;
    if (flagged) this.flag.setSleeping(false).catch(() => undefined);
  }
}
