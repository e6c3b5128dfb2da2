import { aggregateKey } from '../aggregate-key.js';
import { errorMessage } from '../errors.js';
import { redactText } from '../redact.js';
import { loopErrorDelay, outageDelay } from '../relay/backoff.js';
import { Claimer } from '../relay/claim/claim.js';
import { GapWatch } from '../relay/claim/gap-watch.js';
import { HoldBack } from '../relay/claim/hold-back.js';
import { Pipeline } from '../relay/claim/pipeline.js';
import { SequenceFaults } from '../relay/claim/sequence-faults.js';
import { BRIDGE_GAPS_SQL, REPEAT_DEAD_SQL } from '../relay/claim/sequence-faults-sql.js';
import type { ResolvedRelayOptions } from '../relay/options.js';
import { type OutageLog, RefusedAggregates } from '../relay/outage.js';
import { outcomeStatement } from '../relay/outcome-sql.js';
import { BatchPublisher } from '../relay/publish-batch.js';
import { Recorder } from '../relay/record.js';
import { RelaySession, relaySessionSettings, relayStatement } from '../relay/session.js';
import type { RelayCounters } from '../relay/stats.js';
import { Doorbell } from '../relay/wakeup.js';
import type { Handover } from './handover.js';
import { POLLED_CLAIM_SQL } from './handover-sql.js';

export interface PollPathParts {
  readonly o: ResolvedRelayOptions;
  readonly leases: { snapshot(): { partitions: number[]; epochs: string[] } };
  readonly counters: RelayCounters;
  readonly outage: OutageLog;
  readonly handover: Handover;
  /** Table row ids the stream has in flight: P leaves them out of its claims. */
  readonly streamInFlight: () => readonly string[];
  /** Aggregates on their way into the table (a handover not committed yet): not released. */
  readonly handingOver: (key: string) => boolean;
  readonly stopping: AbortSignal;
}

/** How often P looks for polled aggregates it can give back to the stream, ms. */
const RELEASE_EVERY_MS = 1000;

/**
 * The CDC relay's polling path (P): the polling relay's claim → publish → record, restricted to
 * the polled aggregates ({@link Handover}) and without the ids the stream has in flight, woken
 * on every handover, else every poll interval. Between batches, with nothing in flight, it
 * gives the aggregates with nothing left in the table back to the stream.
 */
export class PollPath {
  readonly #bell = new Doorbell();
  readonly #claimSession: RelaySession;
  readonly #recordSession: RelaySession;
  readonly #faults: SequenceFaults;
  readonly #refused = new RefusedAggregates();
  readonly #pipeline: Pipeline;
  readonly #batches: BatchPublisher;
  #loop: Promise<void> | undefined;
  #halt = false;
  #lastRelease = 0;
  #refusedBatches = 0;
  #ready: () => boolean = () => true;

  constructor(private readonly p: PollPathParts) {
    const o = p.o;
    const settings = relaySessionSettings(o.synchronousCommit);
    this.#claimSession = new RelaySession(o.pool, settings, o.logger, 'cdc-poll-claim');
    this.#recordSession = new RelaySession(o.pool, settings, o.logger, 'cdc-poll-outcome');
    const holdBack = new HoldBack(o.pollIntervalMs, o.logger, o.relayId);
    this.#faults = new SequenceFaults({
      relayId: o.relayId,
      logger: o.logger,
      counters: p.counters,
      watch: new GapWatch({ graceMs: o.gapGraceMs, forgetMs: Math.max(60_000, 5 * o.pollIntervalMs) }),
      holdBack,
      repeatDead: relayStatement('repeat_dead', REPEAT_DEAD_SQL, o.schema, o.quotedSchema),
      bridgeGaps: relayStatement('bridge_gaps', BRIDGE_GAPS_SQL, o.schema, o.quotedSchema),
      probeSession: new RelaySession(o.pool, settings, o.logger, 'cdc-poll-probe'),
    });
    const claimer = new Claimer({
      session: this.#claimSession,
      statement: relayStatement('cdc_claim', POLLED_CLAIM_SQL, o.schema, o.quotedSchema),
      relayId: o.relayId,
      batchSize: o.batchSize,
      leases: p.leases,
      holdBack,
      refused: this.#refused,
      faults: this.#faults,
      watch: p.counters.watches.claim,
      scope: () => ({ exclude: p.streamInFlight(), values: [p.handover.claimScopeJson()] }),
    });
    const recorder = new Recorder(
      this.#recordSession,
      relayStatement(...outcomeStatement(o.history), o.schema, o.quotedSchema),
      o.relayId,
      o.logger,
      p.counters,
      o.history ? [o.publisher.name] : [],
    );
    this.#pipeline = new Pipeline(claimer, recorder, holdBack);
    this.#batches = new BatchPublisher({
      publisher: o.publisher,
      publishTimeoutMs: o.publishTimeoutMs,
      stopping: p.stopping,
      counters: p.counters,
      refused: this.#refused,
      policy: o,
    });
  }

  /** Runs the loop (again, after {@link stop}); it claims nothing until `ready()`. */
  start(ready: () => boolean = () => true): void {
    if (this.#loop) return;
    this.#halt = false;
    this.#ready = ready;
    this.#loop = this.loop();
  }

  /** Finishes the batch in flight and stops. */
  async stop(): Promise<void> {
    this.#halt = true;
    this.#bell.wake();
    await this.#loop;
    this.#loop = undefined;
  }

  /** Sessions and the gap probe given back (the relay stops). */
  async close(timeoutMs: number): Promise<void> {
    await this.stop();
    await this.#faults.stopped(timeoutMs);
    await Promise.all([this.#claimSession.release(), this.#recordSession.release()]);
  }

  /** A handover committed: claim now. */
  wake(): void {
    this.#bell.wake();
  }

  private async loop(): Promise<void> {
    const { o, handover } = this.p;
    const pipeline = this.#pipeline;
    let failures = 0;
    while (!this.#halt) {
      try {
        if (performance.now() - this.#lastRelease >= RELEASE_EVERY_MS) {
          await pipeline.drain();
          this.#lastRelease = performance.now();
          await handover.release(o.pool, this.p.handingOver);
        }
        if (handover.size === 0 || !this.#ready()) {
          await this.#bell.sleep(Math.min(o.pollIntervalMs, RELEASE_EVERY_MS));
          continue;
        }
        const claimed = await pipeline.next();
        if (claimed.messages.length === 0) {
          if (pipeline.recording) await pipeline.drain();
          else if (claimed.scanned === 0)
            await this.#bell.sleep(Math.min(o.pollIntervalMs, RELEASE_EVERY_MS));
          continue;
        }
        pipeline.track(claimed);
        // A full claim: there is likely more, so the next one runs while this batch publishes
        // (as the polling relay does). The claim leaves out this batch's ids and holds back
        // their aggregates, so the two never overlap on one aggregate.
        if (!this.#halt && claimed.scanned === o.batchSize) pipeline.prefetch();
        const verdict = await this.#batches.publish(claimed);
        const byId = new Map(claimed.messages.map((m) => [m.id, m]));
        for (const id of verdict.delivered) {
          const m = byId.get(id);
          if (m) handover.deliveredByPoll(aggregateKey(m), m.sequence);
        }
        await pipeline.record(verdict);
        failures = 0;
        if (verdict.unavailable === 0) {
          this.#refusedBatches = 0;
          if (this.#refused.outstanding() === 0) this.p.outage.recovered();
          continue;
        }
        this.#refusedBatches += 1;
        this.p.outage.refused(verdict.unavailable, this.p.counters.lastError);
        const delay = outageDelay(this.#refusedBatches, o.random);
        this.#refused.refused(verdict.refused, Date.now() + delay);
        if (verdict.delivered.length === 0 && verdict.failures.length === 0) {
          await pipeline.drain();
          await this.#bell.sleep(delay);
        }
      } catch (error) {
        await pipeline.drain().catch(() => undefined);
        pipeline.reset();
        if (this.#halt) break;
        failures += 1;
        this.p.counters.lastError = redactText(errorMessage(error));
        await Promise.all([this.#claimSession.release(error), this.#recordSession.release(error)]);
        const delay = loopErrorDelay(failures, o.random);
        o.logger.error(
          { err: error, relayId: o.relayId, retryInMs: delay },
          'CDC polling path error; backing off',
        );
        await this.#bell.sleep(delay);
      }
    }
    await pipeline.drain().catch((error: unknown) => {
      o.logger.warn(
        { err: error, relayId: o.relayId },
        'last polled outcome not recorded; its events will be republished',
      );
    });
    pipeline.reset();
  }
}
