/**
 * What a relay started in the background (history, pruner, backlog gauges, heartbeat, timers),
 * each with its stop: stopped in the reverse order of their start, once.
 */
export class ReleaseStack {
  readonly #stops: (() => unknown)[] = [];

  /** `stop` runs at {@link releaseAll}, before everything pushed earlier. */
  push(stop: () => unknown): void {
    this.#stops.push(stop);
  }

  /** A timer, cleared at {@link releaseAll}. */
  interval(timer: NodeJS.Timeout): void {
    this.push(() => clearInterval(timer));
  }

  /** Stops everything in reverse order; a stop that throws does not keep the others from running. */
  async releaseAll(): Promise<void> {
    for (let stop = this.#stops.pop(); stop; stop = this.#stops.pop())
      await Promise.resolve(stop()).catch(() => undefined);
  }
}
