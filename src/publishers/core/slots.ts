import type { CallAbort } from './call-abort.js';

/**
 * A counting semaphore bounding the messages in flight (`maxInFlight`, `concurrency`). Fair: a
 * released slot goes to the longest waiter. A wait ends with `false` when the pool is closed or
 * when the caller cancels it (abort, shutdown) through the function handed to `onWait`.
 */
export class Slots {
  #free: number;
  /** Insertion-ordered: the longest waiter gets the next free slot. */
  readonly #waiters = new Set<(granted: boolean) => void>();
  #closed = false;

  constructor(size: number) {
    this.#free = size;
  }

  /** Takes a free slot at once, or returns false without waiting. */
  tryAcquire(): boolean {
    if (this.#closed || this.#free === 0 || this.#waiters.size > 0) return false;
    this.#free -= 1;
    return true;
  }

  /**
   * Resolves true with a slot held, or false when the pool closed or the wait was cancelled.
   * While it waits, `onWait` receives the function that cancels the wait.
   */
  acquire(onWait?: (cancel: () => void) => void): Promise<boolean> {
    if (this.tryAcquire()) return Promise.resolve(true);
    if (this.#closed) return Promise.resolve(false);
    return new Promise<boolean>((resolve) => {
      const wake = (granted: boolean): void => {
        if (this.#waiters.delete(wake)) resolve(granted);
      };
      this.#waiters.add(wake);
      onWait?.(() => wake(false));
    });
  }

  release(): void {
    if (this.#waiters.size === 0) {
      this.#free += 1; // the usual case: no iterator made
      return;
    }
    const next = this.#waiters.values().next();
    if (next.done) this.#free += 1;
    else next.value(true);
  }

  /**
   * Every waiter gets false, but the pool stays open: for a link that went down (the waiters
   * give up now, later acquires wait as usual).
   */
  cancelWaits(): void {
    for (const wake of [...this.#waiters]) wake(false);
  }

  /** Every waiter gets false; later acquires fail at once. */
  close(): void {
    this.#closed = true;
    for (const wake of [...this.#waiters]) wake(false);
  }
}

/**
 * Takes one of `slots` for a call: false at once when the call is aborted, and a wait that is
 * cancelled (false) when it aborts meanwhile.
 */
export async function acquireSlot(slots: Slots, abort: CallAbort): Promise<boolean> {
  if (abort.cause !== undefined) return false;
  let unsubscribe = (): void => undefined;
  const granted = await slots.acquire((cancel) => {
    unsubscribe = abort.onAbort(cancel);
  });
  unsubscribe();
  return granted;
}
