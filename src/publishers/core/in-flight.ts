/**
 * The work of a publisher still under way (publish calls, sends awaiting their answer), so that
 * `close()` can wait for it. Each piece is counted until it settles, however it settles.
 */
export class InFlight {
  readonly #pending = new Set<Promise<void>>();

  /** Counts `work` until it settles; `then` (e.g. freeing its slot) runs when it has. */
  track(work: Promise<unknown>, then?: () => void): void {
    const settled = work.then(
      () => undefined,
      () => undefined,
    );
    this.#pending.add(settled);
    void settled.then(() => {
      this.#pending.delete(settled);
      then?.();
    });
  }

  /** Resolves once everything counted now has settled (never rejects). */
  settled(): Promise<void> {
    return Promise.allSettled([...this.#pending]).then(() => undefined);
  }
}
