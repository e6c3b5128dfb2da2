/**
 * Runs tasks with at most `concurrency` at once, never two of the same key
 * together, and those of one key in submission order: consumer adapters hand
 * each delivery to it keyed by aggregate, so concurrency never reorders one
 * aggregate.
 */
export class KeyedQueue {
  private running = 0;
  private readonly tails = new Map<string, Promise<unknown>>();
  private readonly waiting: Array<() => void> = [];

  constructor(private readonly concurrency: number) {
    if (!Number.isInteger(concurrency) || concurrency < 1)
      throw new RangeError('concurrency must be a positive integer');
  }

  /** Resolves with the task's result once it ran (after earlier tasks of the same key). */
  run<T>(key: string, task: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    const result = previous.then(
      () => this.slot(task),
      () => this.slot(task),
    );
    const tail = result.catch(() => undefined);
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return result;
  }

  /** Tasks submitted and not finished. */
  get size(): number {
    return this.running + this.waiting.length;
  }

  private async slot<T>(task: () => Promise<T>): Promise<T> {
    if (this.running >= this.concurrency) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.running += 1;
    try {
      return await task();
    } finally {
      this.running -= 1;
      this.waiting.shift()?.();
    }
  }
}
