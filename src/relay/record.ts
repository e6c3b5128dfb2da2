import type { Logger } from '../logger.js';
import type { RelaySession, Statement } from './session.js';
import type { RelayCounters } from './stats.js';
import type { Verdict } from './verdicts.js';

export interface RecorderParts {
  readonly session: RelaySession;
  readonly statement: Statement;
  readonly relayId: string;
  readonly logger: Logger;
  readonly counters: RelayCounters;
}

/**
 * The record step: a batch's verdict in one statement ({@link RECORD_OUTCOME_SQL}), fenced by
 * the epochs it was claimed under. An outcome the fence turned away (a partition changed owner
 * during the batch) is logged; the new owner republishes those events.
 */
export class Recorder {
  constructor(private readonly p: RecorderParts) {}

  async record(verdict: Verdict): Promise<void> {
    const { delivered, failures, claimed } = verdict;
    if (delivered.length === 0 && failures.length === 0) return;
    const p = this.p;
    const client = await p.session.get();
    const started = performance.now();
    const { rows: result } = await client.query<{ delivered: number; failed: number }>({
      ...p.statement,
      values: [
        p.relayId,
        claimed.partitions,
        claimed.epochs,
        delivered,
        failures.map((f) => f.id),
        failures.map((f) => f.status),
        failures.map((f) => f.delayMs),
        failures.map((f) => f.error),
      ],
    });
    p.counters.watches.record.add(performance.now() - started);
    const recorded = result[0];
    p.counters.recorded(recorded?.delivered ?? 0, failures);
    if (recorded && recorded.delivered + recorded.failed < delivered.length + failures.length) {
      p.logger.warn(
        {
          relayId: p.relayId,
          expected: delivered.length + failures.length,
          recorded: recorded.delivered + recorded.failed,
        },
        'outcome fenced: a partition changed owner during the batch; the new owner will republish',
      );
    }
  }
}
