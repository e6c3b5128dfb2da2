import type { Logger } from '../logger.js';

/** The counter of failed scrape-time callbacks; label-free, one per registry or meter. */
export const SCRAPE_ERRORS = 'tx_outbox_scrape_errors_total';
export const SCRAPE_ERRORS_HELP =
  'Scrape-time metric callbacks (e.g. the backlog query) that failed or ran out of time; their gauges kept their last values.';

/**
 * How long a scrape waits for a callback. A database that hangs (not refusing: hanging) must not
 * hang `/metrics`: Prometheus would mark the target down and every series, the alerts' among them,
 * would vanish. Past this the scrape is served with the last values, and the callback is not
 * started again while it is still running.
 */
export const COLLECT_TIMEOUT_MS = 2000;

/**
 * The scrape-time callbacks of one registry or meter, shared by every sink on it. A scrape
 * calls {@link run} once per gauge; the calls of one scrape share one run while it is under
 * way, so each callback runs once per scrape.
 */
export class CollectHub {
  private readonly fns = new Map<() => void | Promise<void>, Logger>();
  /** Callbacks still running from an earlier scrape that ran out of time. */
  private readonly late = new Set<() => void | Promise<void>>();
  private running: Promise<void> | undefined;

  constructor(
    private readonly failed: () => void,
    private readonly timeoutMs = COLLECT_TIMEOUT_MS,
  ) {}

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
        if (this.late.has(fn)) {
          this.failed();
          return;
        }
        let timer: NodeJS.Timeout | undefined;
        const call = Promise.resolve().then(fn);
        const timedOut = new Promise<'timeout'>((resolve) => {
          timer = setTimeout(() => resolve('timeout'), this.timeoutMs);
          timer.unref();
        });
        try {
          if ((await Promise.race([call, timedOut])) === 'timeout') {
            this.late.add(fn);
            void call
              .catch(() => undefined)
              .finally(() => {
                this.late.delete(fn);
              });
            this.failed();
            logger.warn(
              { timeoutMs: this.timeoutMs },
              'a scrape-time metric callback ran out of time; its gauges keep their last values',
            );
          }
        } catch (error) {
          this.failed();
          logger.warn(
            { err: error },
            'a scrape-time metric callback failed; its gauges keep their last values',
          );
        } finally {
          clearTimeout(timer);
        }
      }),
    );
  }
}
