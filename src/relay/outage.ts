import type { Logger } from '../logger.js';

/**
 * What the relay says while its broker cannot be reached (`TXO_BROKER_UNAVAILABLE`): the first
 * refused batch at once, with the cause; a reminder at most every `reminderMs` while it lasts,
 * with how long and how many batches so far; and the recovery, with how long it lasted.
 * An outage the relay only counted would be silent for as long as it lasts.
 */
export class OutageLog {
  #since: number | undefined;
  #lastLog = 0;
  #batches = 0;
  #events = 0;

  constructor(
    private readonly logger: Logger,
    private readonly context: Readonly<Record<string, unknown>>,
    private readonly reminderMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** Since when the broker is unavailable, or undefined when it is not. */
  get since(): number | undefined {
    return this.#since;
  }

  /** A batch had `events` publishes refused as unavailable; `error` is the last one's message. */
  refused(events: number, error: string | undefined): void {
    const now = this.now();
    this.#batches += 1;
    this.#events += events;
    if (this.#since === undefined) {
      this.#since = now;
      this.#lastLog = now;
      this.logger.warn(
        { ...this.context, error, refused: events },
        'broker unavailable: publishes refused; retrying with backoff, no attempt charged',
      );
      return;
    }
    if (now - this.#lastLog < this.reminderMs) return;
    this.#lastLog = now;
    this.logger.warn(
      {
        ...this.context,
        error,
        downForMs: now - this.#since,
        refusedBatches: this.#batches,
        refusedEvents: this.#events,
      },
      'broker still unavailable',
    );
  }

  /** A batch went through without a refusal: ends the outage, if there was one. */
  recovered(): void {
    if (this.#since === undefined) return;
    this.logger.info(
      {
        ...this.context,
        downForMs: this.now() - this.#since,
        refusedBatches: this.#batches,
        refusedEvents: this.#events,
      },
      'broker available again',
    );
    this.#since = undefined;
    this.#batches = 0;
    this.#events = 0;
  }
}
