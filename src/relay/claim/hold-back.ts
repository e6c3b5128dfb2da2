import { aggregateKeyOf } from '../../aggregate-key.js';
import type { Logger } from '../../logger.js';

/** A row the claim statement returned without passing the gate (`passed = false`). */
export interface HeldRow {
  readonly aggregate_type: string;
  readonly aggregate_id: string;
}

/** More than this many aggregates counted: the counts start over (they only pace a warning). */
const MAX_COUNTED = 10_000;

/**
 * The ordering gate's hold-back cache, the relay's half of the gate between claims.
 *
 * Aggregates whose next event is not claimable (scheduled for later with deliverAfter, or
 * missing — a sequence gap) are held back for `holdMs` (the poll interval), so their later
 * events do not fill the claims. Aggregates with an event in flight, or whose outcome landed while
 * the claim ran, are not held: the next claim sees them as they are. The times an aggregate was held
 * count the claims that held it back, however many of its events each claim returned; at 10
 * and every 100th a warning names it. Claiming an event of the aggregate resets the count.
 */
export class HoldBack {
  /** Held aggregates, each until when (ms since the epoch). */
  readonly #until = new Map<string, number>();
  /** How many claims in a row held each aggregate back. */
  readonly #times = new Map<string, number>();
  /** Aggregates with events in flight (claimed, outcome not yet recorded), with how many. */
  readonly #inFlight = new Map<string, number>();
  /**
   * The highest sequence this relay claimed of each aggregate that is {@link busy}: in flight, or
   * whose outcome was recorded during the current claim. Kept until a claim starts after the
   * last of those outcomes was recorded — see {@link repeats} for why that is exactly long enough.
   */
  readonly #top = new Map<string, number>();
  /** Aggregates whose outcome was recorded since the current claim started. */
  readonly #landedSince = new Set<string>();

  constructor(
    private readonly holdMs: number,
    private readonly logger: Logger,
    private readonly relayId: string,
    private readonly now: () => number = Date.now,
  ) {}

  /** An event (`sequence`) of the aggregate `key` was claimed: in flight until {@link landed}. */
  claimed(key: string, sequence = 0): void {
    this.#inFlight.set(key, (this.#inFlight.get(key) ?? 0) + 1);
    this.#top.set(key, Math.max(this.#top.get(key) ?? 0, sequence));
    this.#times.delete(key);
  }

  /** The outcome of one claimed event of `key` was recorded (or given up on). Its top is kept: see {@link repeats}. */
  landed(key: string): void {
    this.#landedSince.add(key);
    const left = (this.#inFlight.get(key) ?? 1) - 1;
    if (left > 0) this.#inFlight.set(key, left);
    else this.#inFlight.delete(key);
  }

  /**
   * A row the claim passed at `sequence` may repeat an event of `key` this relay published: it
   * must wait (the next claim sees the outcome, and marks it a repeat). Why this is exact:
   * - The claim reads `delivered` from its snapshot, taken when its statement starts. An outcome
   *   recorded (committed, and {@link landed} called) before {@link claimStarting} is in that
   *   snapshot: the gate saw it, and classified a repeat of it as `repeat`.
   * - Any other event of `key` this relay published is in flight, or its outcome landed while the
   *   claim ran — in the snapshot or not, nobody knows. Both are in {@link #top}, which is dropped
   *   only at the first claim that starts after the outcome landed.
   * So a passed row at or below `#top` is a second event with a sequence this relay published or
   * is publishing, never a new one (a new one is above what was published: that is what passing
   * means). Default sequences never reach this: the producer numbers them from one counter row
   * per aggregate, under its lock, so no two events of an aggregate share a sequence.
   */
  repeats(key: string, sequence: number): boolean {
    const top = this.#top.get(key);
    return top !== undefined && top >= sequence;
  }

  /** The aggregates with events in flight (the claim withholds their payloads). */
  inFlightKeys(): string[] {
    return [...this.#inFlight.keys()];
  }

  /** A claim starts (claims never overlap: the pipeline prefetches one at a time). */
  claimStarting(): void {
    // Every outcome recorded so far is in the snapshot of the claim starting now.
    for (const key of this.#landedSince) if (!this.#inFlight.has(key)) this.#top.delete(key);
    this.#landedSince.clear();
  }

  /**
   * An event of the aggregate `key` is claimed and its outcome not recorded yet, or was
   * recorded while the current claim ran: that claim may have read the aggregate's progress
   * from before, and seen its next event as not following.
   */
  busy(key: string): boolean {
    return this.#inFlight.has(key) || this.#landedSince.has(key);
  }

  /** The aggregate `key` is claimable again at once (its gap was bridged). */
  release(key: string): void {
    this.#until.delete(key);
    this.#times.delete(key);
  }

  /** Nothing is in flight any more (the loop dropped its pipeline after an error). */
  forgetInFlight(): void {
    this.#inFlight.clear();
    this.#top.clear();
    this.#landedSince.clear();
  }

  /** Holds back the aggregates of one claim's rows that did not pass the gate. */
  hold(rows: readonly HeldRow[]): void {
    const until = this.now() + this.holdMs;
    const seen = new Set<string>();
    for (const r of rows) {
      const key = aggregateKeyOf(r.aggregate_type, r.aggregate_id);
      // In flight, or its outcome landed while the claim ran (the claim's snapshot may predate
      // it): the next claim sees the aggregate as it is now, so it is not held back for holdMs.
      if (this.busy(key) || seen.has(key)) continue;
      seen.add(key);
      const times = (this.#times.get(key) ?? 0) + 1;
      this.#times.set(key, times);
      this.#until.set(key, until);
      if (times === 10 || times % 100 === 0) {
        this.logger.warn(
          { relayId: this.relayId, aggregateType: r.aggregate_type, aggregateId: r.aggregate_id, times },
          'aggregate held back: its next event is scheduled for later (deliverAfter) or missing (sequence gap; bridged after gapGraceMs when nothing earlier is left)',
        );
      }
    }
  }

  /** The keys the next claim leaves out: the aggregates held back now, then `also`. */
  excluded(also: readonly string[]): string[] {
    const now = this.now();
    for (const [key, until] of this.#until) {
      if (until <= now) this.#until.delete(key);
    }
    if (this.#times.size > MAX_COUNTED) this.#times.clear();
    return [...this.#until.keys(), ...also];
  }
}
