/**
 * The running/stopping state every consumer adapter keeps, written once: the caller's abort
 * signal wired to `stop()`, one idempotent `stop()` (every call gets the same promise), a `halt`
 * signal that ends the waits (deferral delays, reconnect backoff) when stopping begins, and the
 * deliveries in flight, which `stop()` waits for before the adapter closes what it opened.
 *
 *   readonly #life = new ConsumerLifecycle(options.signal, () => this.#shutdown());
 *   start()    { …; this.#life.started(); }
 *   stop()     { return this.#life.stop(); }
 *   #shutdown  { stop reading; await this.#life.settled(); close what the adapter opened }
 */
export class ConsumerLifecycle {
  readonly #signal: AbortSignal | undefined;
  readonly #shutdown: () => Promise<void>;
  readonly #halt = new AbortController();
  readonly #tasks = new Set<Promise<unknown>>();
  #stopping = false;
  #stopped: Promise<void> | undefined;
  readonly #onAbort = (): void => void this.stop();

  /** `shutdown` runs once, on the first `stop()` (or when `signal` aborts after `started()`). */
  constructor(signal: AbortSignal | undefined, shutdown: () => Promise<void>) {
    this.#signal = signal;
    this.#shutdown = shutdown;
  }

  /** True from the first `stop()` on (already while the shutdown runs). */
  get stopping(): boolean {
    return this.#stopping;
  }

  /** Aborts when stopping begins: hand it to the adapter's waits so that none outlives a stop. */
  get halt(): AbortSignal {
    return this.#halt.signal;
  }

  /**
   * Call at the end of a successful start: from now on the caller's signal stops the consumer
   * (at once when it aborted already).
   */
  started(): void {
    if (this.#signal?.aborted) void this.stop();
    else this.#signal?.addEventListener('abort', this.#onAbort, { once: true });
  }

  /** Stops once: unhooks the caller's signal, aborts {@link halt}, runs the shutdown. */
  stop(): Promise<void> {
    if (this.#stopped === undefined) {
      this.#stopping = true;
      this.#signal?.removeEventListener('abort', this.#onAbort);
      this.#halt.abort();
      this.#stopped = this.#shutdown();
    }
    return this.#stopped;
  }

  /** Counts `task` in flight until it settles; returns it. */
  track<T>(task: Promise<T>): Promise<T> {
    this.#tasks.add(task);
    void task.finally(() => this.#tasks.delete(task));
    return task;
  }

  /** Tasks tracked and not settled. */
  get inFlight(): number {
    return this.#tasks.size;
  }

  /** Resolves when one of the tasks in flight settles (backpressure). */
  async oneSettled(): Promise<void> {
    await Promise.race(this.#tasks);
  }

  /** Resolves when no task is in flight any more (tasks started meanwhile included). */
  async settled(): Promise<void> {
    while (this.#tasks.size > 0) await Promise.all(this.#tasks);
  }
}
