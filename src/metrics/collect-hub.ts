import type { Logger } from '../logger.js';

/** The counter of failed scrape-time callbacks; label-free, one per registry or meter. */
export const SCRAPE_ERRORS = 'tx_outbox_scrape_errors_total';
export const SCRAPE_ERRORS_HELP =
  'Scrape-time metric callbacks (e.g. the backlog query) that failed; their gauges kept their last values.';

/**
 * The scrape-time callbacks of one registry or meter, shared by every sink on it. A scrape
 * calls {@link run} once per gauge; the calls of one scrape share one run while it is under
 * way, so each callback runs once per scrape.
 */
export class CollectHub {
  private readonly fns = new Map<() => void | Promise<void>, Logger>();
  private running: Promise<void> | undefined;

  constructor(private readonly failed: () => void) {}

  get size(): number {
    return this.fns.size;
  }

  add(fn: () => void | Promise<void>, logger: Logger): () => void {
    this.fns.set(fn, logger);
    return () => {
      this.fns.delete(fn);
    };
  }

  /** Runs every callback (once per scrape); never rejects. */
  run(): Promise<void> {
    if (this.fns.size === 0) return Promise.resolve();
    this.running ??= this.runAll().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  private async runAll(): Promise<void> {
    await Promise.all(
      [...this.fns].map(async ([fn, logger]) => {
        try {
          await fn();
        } catch (error) {
          this.failed();
          logger.warn(
            { err: error },
            'a scrape-time metric callback failed; its gauges keep their last values',
          );
        }
      }),
    );
  }
}
