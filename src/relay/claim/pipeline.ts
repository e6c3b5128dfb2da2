import { aggregateKey } from '../../aggregate-key.js';
import type { Recorder } from '../record.js';
import type { Verdict } from '../verdicts.js';
import type { Claimed, Claimer } from './claim.js';
import type { HoldBack } from './hold-back.js';

/**
 * The relay loop's three-stage pipeline: while batch k is published, batch k-1's outcome is
 * recorded and batch k+1 is claimed. A claim skips the ids of every batch not yet recorded,
 * and the ordering gate holds back the later events of their aggregates (their progress has
 * not advanced), so stages never overlap on one aggregate. The loop drains the pipeline
 * before leases are rebalanced and before idling.
 */
export class Pipeline {
  #prefetch: Promise<Claimed> | undefined;
  #recording: Promise<void> | undefined;
  /** Ids of the events claimed whose outcome is not recorded yet. */
  readonly #inFlight = new Set<string>();

  constructor(
    private readonly claimer: Claimer,
    private readonly recorder: Recorder,
    private readonly holdBack: HoldBack,
  ) {}

  /** A claim is under way for the next batch. */
  get prefetched(): boolean {
    return this.#prefetch !== undefined;
  }

  /** An outcome is being recorded. */
  get recording(): boolean {
    return this.#recording !== undefined;
  }

  /** The next batch: the claim prefetched, or a new one. */
  next(): Promise<Claimed> {
    const claimed = this.#prefetch ?? this.claimer.claim([...this.#inFlight]);
    this.#prefetch = undefined;
    return claimed;
  }

  /** The batch is in flight until its outcome is recorded. */
  track(claimed: Claimed): void {
    for (const message of claimed.messages) {
      this.#inFlight.add(message.id);
      this.holdBack.claimed(aggregateKey(message), message.sequence);
    }
  }

  /** Claims the next batch now, while this one is published. */
  prefetch(): void {
    const claimed = this.claimer.claim([...this.#inFlight]);
    claimed.catch(() => undefined);
    this.#prefetch = claimed;
  }

  /** Waits for the previous batch's outcome, then starts recording this one's. */
  async record(verdict: Verdict): Promise<void> {
    await this.#recording;
    const claimed = verdict.claimed;
    const recording = this.recorder.record(verdict).finally(() => this.untrack(claimed));
    recording.catch(() => undefined);
    this.#recording = recording;
  }

  /** Waits for the claim and the recording under way; rejects if the recording failed. */
  async drain(): Promise<void> {
    const prefetch = this.#prefetch;
    const recording = this.#recording;
    this.#prefetch = undefined;
    this.#recording = undefined;
    await prefetch?.catch(() => undefined);
    await recording;
  }

  /** After a loop error (once drained): nothing is in flight any more. */
  reset(): void {
    this.#inFlight.clear();
    this.holdBack.forgetInFlight();
  }

  private untrack(claimed: Claimed): void {
    for (const message of claimed.messages) {
      this.#inFlight.delete(message.id);
      this.holdBack.landed(aggregateKey(message));
    }
  }
}
