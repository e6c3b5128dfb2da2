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

  /** Batches refused since the outage began (0 when there is none): the relay's backoff step. */
  get refusedBatches(): number {
    return this.#batches;
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

/** How long past its retry time a refused aggregate may stay unseen before it is forgotten. */
const FORGET_AFTER_MS = 10_000;

/**
 * Aggregates whose publish was refused as unavailable in a batch where other events got
 * through (one destination down behind a router, a broker lost mid-batch): they are left out
 * of claims until their retry time, so the relay keeps delivering the rest at full speed
 * instead of sleeping a backoff per batch, and retries the refused ones with that backoff.
 * The outage lasts until each has gone through (or, gone from the relay's claims — dead,
 * deleted, its partition moved — is forgotten a while after its retry time).
 */
export class RefusedAggregates {
  readonly #until = new Map<string, number>();

  constructor(private readonly now: () => number = Date.now) {}

  /** These aggregates were refused; left out of claims until `until`. */
  refused(keys: Iterable<string>, until: number): void {
    for (const key of keys) this.#until.set(key, until);
  }

  /** An event of this aggregate was published or judged: it is not refused any more. */
  settled(key: string): void {
    this.#until.delete(key);
  }

  /** No aggregate is refused (nothing for {@link settled} to do). */
  get empty(): boolean {
    return this.#until.size === 0;
  }

  /** The aggregates to leave out of the next claim. */
  waiting(): string[] {
    const now = this.now();
    const keys: string[] = [];
    for (const [key, until] of this.#until) if (until > now) keys.push(key);
    return keys;
  }

  /** How many refused aggregates have not gone through yet. */
  outstanding(): number {
    const forget = this.now() - FORGET_AFTER_MS;
    for (const [key, until] of this.#until) if (until < forget) this.#until.delete(key);
    return this.#until.size;
  }
}
