import { errorMessage } from '../errors.js';
import { redactText } from '../redact.js';
import { loopErrorDelay, outageDelay } from './backoff.js';
import { LOOP_ERRORS_NOT_READY } from './health.js';
import type { ResolvedRelayOptions } from './options.js';
import { type OutageLog, RefusedAggregates } from './outage.js';
import { BatchPublisher } from './publish-batch.js';
import type { RelaySource, SourceBatch } from './source.js';
import type { RelayCounters } from './stats.js';
import type { Verdict } from './verdicts.js';
import { Doorbell } from './wakeup.js';

/** Loop errors in a row: the backoff's step, and what {@link RelayHealth} reports. */
export class LoopErrors {
  /** Errors in a row, the backoff's step. */
  failures = 0;
  /** What health reports: the errors in a row, or more when the source says it cannot run. */
  inARow = 0;

  failed(): number {
    this.failures += 1;
    this.inARow = this.failures;
    return this.failures;
  }

  /** A batch went through (or the source runs again): no errors in a row. */
  healthy(): void {
    this.failures = 0;
    this.inARow = 0;
  }

  /** The source cannot run until an operator acts (a lost slot): not ready whatever the count. */
  notReady(): void {
    this.inARow = Math.max(this.inARow, LOOP_ERRORS_NOT_READY);
  }
}

/** What a loop shares with the relay around it. */
export interface LoopParts {
  readonly o: ResolvedRelayOptions;
  readonly counters: RelayCounters;
  /** The relay's outage log: its refused-batch count is the outage backoff's step. */
  readonly outage: OutageLog;
  /** Aborted when the relay's stop deadline passes: the publish call in flight is cut short. */
  readonly stopping: AbortSignal;
}

/**
 * The relay loop, one for every source: `next → publish → judged → settle`, with one outage
 * wait (publishes refused as unavailable charge no attempt; their aggregates wait out a backoff
 * that grows with the outage's refused batches) and one error backoff (the source resets, the
 * loop waits a backoff growing with the errors in a row). Runs until {@link stop}; can run again.
 */
export class RelayLoop<B extends SourceBatch = SourceBatch> {
  /** Rings on wake(), on work for the source, and on stop. */
  readonly bell = new Doorbell();
  /** Aggregates refused as unavailable: the source leaves them out until their retry time. */
  readonly refused = new RefusedAggregates();
  readonly errors = new LoopErrors();
  readonly #batches: BatchPublisher;
  #halt = false;
  #done: Promise<void> | undefined;

  constructor(private readonly p: LoopParts) {
    this.#batches = new BatchPublisher({
      publisher: p.o.publisher,
      publishTimeoutMs: p.o.publishTimeoutMs,
      stopping: p.stopping,
      counters: p.counters,
      refused: this.refused,
      policy: p.o,
    });
  }

  /** Stopping (or stopped): the source takes nothing more. */
  get halted(): boolean {
    return this.#halt;
  }

  get running(): boolean {
    return this.#done !== undefined;
  }

  /** Runs the loop over `source` (again, after {@link stop}); idempotent while it runs. */
  start(source: RelaySource<B>): void {
    if (this.#done) return;
    this.#halt = false;
    this.#done = this.run(source);
  }

  /** Ends the loop after the batch in flight (the caller bounds the wait: see the runtime's stop). */
  async stop(): Promise<void> {
    this.#halt = true;
    this.bell.wake();
    await this.#done;
    this.#done = undefined;
  }

  private async run(source: RelaySource<B>): Promise<void> {
    const { o, counters } = this.p;
    while (!this.#halt) {
      try {
        const batch = await source.next();
        if (batch === undefined) {
          await source.idle();
          continue;
        }
        const verdict = await this.#batches.publish(batch);
        source.judged?.(batch, verdict);
        const wait = this.outageWait(verdict);
        await source.settle(batch, verdict);
        this.errors.healthy();
        if (wait !== undefined) {
          await source.drain();
          await this.bell.sleep(wait);
        }
      } catch (error) {
        const failures = this.#halt ? 0 : this.errors.failed();
        if (failures > 0) counters.lastError = redactText(errorMessage(error));
        const wait = await source.reset(error, failures, () => loopErrorDelay(failures, o.random));
        if (this.#halt) break;
        if (wait > 0) await this.bell.sleep(wait);
      }
    }
    await source.stopped();
  }

  /**
   * The outage wait. The broker refused some publishes as unreachable: those events stay as they
   * were and their aggregates are left out of the next batches for a backoff that grows with the
   * batches refused in the outage. Returns how long to wait when nothing got through; when others
   * did (one destination of several down), the loop carries on with them. A batch without
   * refusals ends the outage once no refused aggregate is outstanding.
   */
  private outageWait(verdict: Verdict): number | undefined {
    const { outage, counters, o } = this.p;
    if (verdict.unavailable === 0) {
      if (this.refused.outstanding() === 0) outage.recovered();
      return undefined;
    }
    outage.refused(verdict.unavailable, counters.lastError);
    const delay = outageDelay(outage.refusedBatches, o.random);
    this.refused.refused(verdict.refused, Date.now() + delay);
    return verdict.delivered.length === 0 && verdict.failures.length === 0 ? delay : undefined;
  }
}
