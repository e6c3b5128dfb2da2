import type { Logger } from '../logger.js';
import { bigintArray } from './pg-array.js';
import type { RelaySession, Statement } from './session.js';
import type { RelayCounters } from './stats.js';
import type { Verdict } from './verdicts.js';

/**
 * The record step: a batch's verdict in one statement ({@link RECORD_OUTCOME_SQL}), fenced by
 * the epochs it was claimed under. An outcome the fence turned away (a partition changed owner
 * during the batch) is logged; the new owner republishes those events. Events whose rows were gone
 * under a fence that held were delivered before (a republish: a CDC relay streams again what the
 * previous streamer delivered and had not confirmed): nothing is wrong, and that is said at debug.
 */
export class Recorder {
  constructor(
    private readonly session: RelaySession,
    private readonly statement: Statement,
    private readonly relayId: string,
    private readonly logger: Logger,
    private readonly counters: RelayCounters,
    /** Parameters after the eight of every outcome statement (the history's publisher name). */
    private readonly extraValues: readonly unknown[] = [],
    /**
     * The lean statement (RECORD_CHAINED_DELIVERED_SQL) for a batch of chained events all
     * delivered; none: always `statement` (the history keeps its rows through it).
     */
    private readonly chainedStatement?: Statement,
  ) {}

  async record(verdict: Verdict): Promise<void> {
    const { delivered, failures, claimed } = verdict;
    if (delivered.length === 0 && failures.length === 0) return;
    const client = await this.session.get();
    const started = performance.now();
    const lean = this.chainedStatement !== undefined && failures.length === 0 && claimed.chained === true;
    const { rows: result } = await client.query<{ delivered: number; failed: number; held: number }>(
      lean
        ? {
            ...this.chainedStatement,
            values: [this.relayId, claimed.partitions, claimed.epochs, bigintArray(delivered)],
          }
        : {
            ...this.statement,
            values: [
              this.relayId,
              claimed.partitions,
              claimed.epochs,
              bigintArray(delivered),
              failures.map((f) => f.id),
              failures.map((f) => f.status),
              failures.map((f) => f.delayMs),
              failures.map((f) => f.error),
              ...this.extraValues,
            ],
          },
    );
    this.counters.watches.record.add(performance.now() - started);
    const recorded = result[0];
    this.counters.recorded(recorded?.delivered ?? 0, failures);
    if (recorded && recorded.delivered + recorded.failed < delivered.length + failures.length) {
      const counts = {
        relayId: this.relayId,
        expected: delivered.length + failures.length,
        recorded: recorded.delivered + recorded.failed,
      };
      if (recorded.held < claimed.partitions.length)
        this.logger.warn(
          counts,
          'outcome fenced: a partition changed owner during the batch; the new owner will republish',
        );
      else
        this.logger.debug(counts, 'outcome: events no longer in the table (delivered before, republished)');
    }
  }
}
