/**
 * The work of a publisher still under way (publish calls, sends awaiting their answer), so that
 * `close()` can wait for it. Each piece is counted until it settles, however it settles.
 */
export class InFlight {
  readonly #pending = new Set<Promise<unknown>>();

  /** How many pieces are still under way. */
  get size(): number {
    return this.#pending.size;
  }

  /**
   * Counts `work` until it settles, then runs `then` (e.g. freeing its slot); returns `work`
   * itself, so a caller can track and await in one step.
   */
  track<T>(work: Promise<T>, then?: () => void): Promise<T> {
    this.#pending.add(work);
    const done = (): void => {
      this.#pending.delete(work);
      then?.();
    };
    work.then(done, done);
    return work;
  }

  /** Resolves (never rejects) once everything counted now has settled. */
  settled(): Promise<void> {
    return Promise.allSettled([...this.#pending]).then(() => undefined);
  }
}
