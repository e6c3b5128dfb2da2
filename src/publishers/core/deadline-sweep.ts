/**
 * One timer for many messages awaiting their acknowledgement. Every entry gets the same deadline
 * offset when it is added, so the map's insertion order is deadline order: the timer is armed
 * for the oldest entry only, and each expiry removes the entries past their deadline, oldest
 * first, then re-arms for the next one. The map stays the caller's (acks remove entries from it).
 */
export class DeadlineSweep<Entry extends { readonly deadline: number }> {
  readonly #pending: Map<number, Entry>;
  readonly #expired: (entry: Entry) => void;
  readonly #afterExpiry: () => void;
  #timer: NodeJS.Timeout | undefined;

  /**
   * `expired` is called for each entry removed past its deadline, `afterExpiry` once after a
   * sweep that removed any.
   */
  constructor(pending: Map<number, Entry>, expired: (entry: Entry) => void, afterExpiry: () => void) {
    this.#pending = pending;
    this.#expired = expired;
    this.#afterExpiry = afterExpiry;
  }

  /** After adding an entry due in `delayMs`: arms the timer unless it is armed already. */
  added(delayMs: number): void {
    if (this.#timer === undefined) this.#arm(delayMs);
  }

  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #arm(delayMs: number): void {
    this.#timer = setTimeout(this.#sweep, Math.max(1, Math.ceil(delayMs)));
    this.#timer.unref();
  }

  readonly #sweep = (): void => {
    this.#timer = undefined;
    const now = performance.now();
    let expired = false;
    for (const [token, entry] of this.#pending) {
      if (entry.deadline > now) {
        this.#arm(entry.deadline - now);
        break;
      }
      this.#pending.delete(token);
      this.#expired(entry);
      expired = true;
    }
    if (expired) this.#afterExpiry();
  };
}
