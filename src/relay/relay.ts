import { errorMessage, OutboxError } from '../errors.js';
import { registerBacklogGauges } from '../ops/backlog-gauges.js';
import { wakeChannel } from '../producer/enqueue-sql.js';
import { redactText } from '../redact.js';
import { BacklogTask } from './backlog-task.js';
import { loopErrorDelay, outageDelay } from './backoff.js';
import { type Claimed, Claimer } from './claim.js';
import { CLAIM_SQL } from './claim-sql.js';
import { GapWatch } from './gap-watch.js';
import type { RelayHealth } from './health.js';
import { HISTORY_PARTITIONS_METRIC, HistoryMaintainer } from './history.js';
import { HoldBack } from './hold-back.js';
import { IdleCadence } from './idle.js';
import { LeaseSchedule } from './lease-schedule.js';
import { PartitionLeases } from './leases.js';
import { type RelayOptions, type ResolvedRelayOptions, resolveRelayOptions } from './options.js';
import { OutageLog, RefusedAggregates } from './outage.js';
import { outcomeStatement } from './outcome-sql.js';
import { checkAtStart, PartitionCount } from './partition-count.js';
import { Pipeline } from './pipeline.js';
import { BackgroundPruner } from './pruner.js';
import { BatchPublisher } from './publish-batch.js';
import { Recorder } from './record.js';
import { ScanFloor } from './scan-floor.js';
import { SequenceFaults } from './sequence-faults.js';
import { BRIDGE_GAPS_SQL, REPEAT_DEAD_SQL } from './sequence-faults-sql.js';
import { RelaySession, relaySessionSettings, relayStatement } from './session.js';
import { RelayCounters, type RelayStats } from './stats.js';
import type { Verdict } from './verdicts.js';
import { Doorbell, WakeListener } from './wakeup.js';

export type { RelayHealth } from './health.js';
export type { RelayStats, Timing } from './stats.js';

export interface Relay {
  readonly id: string;
  /** Starts the loop; idempotent. Resolves once the relay is running. */
  start(): Promise<void>;
  /**
   * Finishes the batch in flight (up to `timeout` ms, then aborts it), gives back the leases,
   * and closes the publisher (unless `closePublisher: false`); idempotent. Nothing of the
   * relay's keeps the process alive afterwards (the pool is yours to end).
   */
  stop(options?: { timeout?: number }): Promise<void>;
  /** Wakes an idle relay at once, e.g. right after a commit in the same process. */
  wake(): void;
  stats(): RelayStats;
  /** Running, partitions held, broker outage: what `/readyz` judges (see `serveMetrics`). */
  health(): RelayHealth;
}

/** Creates a polling relay: leased partitions, ordering gate, backoff, dead events. */
export function createRelay(options: RelayOptions): Relay {
  return new PollingRelay(resolveRelayOptions(options));
}

class PollingRelay implements Relay {
  readonly id: string;
  private readonly leases: PartitionLeases;
  private readonly schedule: LeaseSchedule;
  private readonly doorbell = new Doorbell();
  private readonly idle: IdleCadence;
  private readonly claimSession: RelaySession;
  private readonly recordSession: RelaySession;
  /** Marks repeats dead and probes gaps (in the background, on a connection of its own). */
  private readonly faults: SequenceFaults;
  private readonly counters: RelayCounters;
  private readonly outage: OutageLog;
  private readonly refused = new RefusedAggregates();
  private readonly pipeline: Pipeline;
  private readonly batches: BatchPublisher;
  private readonly history: HistoryMaintainer | undefined;
  private readonly backlog: BacklogTask;
  private unregisterBacklogGauges: (() => void) | undefined;
  /** Aborts the publish call in flight once the stop deadline passes. */
  private readonly abort = new AbortController();
  private listener: WakeListener | undefined;
  private loopDone: Promise<void> | undefined;
  private stopping: Promise<void> | undefined;
  private readonly pruner: BackgroundPruner | undefined;
  private halt = false;
  /** Loop errors in a row, for {@link health} (the loop's own count, published). */
  private loopErrorsInARow = 0;
  private renewTimer: NodeJS.Timeout | undefined;
  private readonly partitionCount: PartitionCount;
  private readonly floor: ScanFloor;

  constructor(private readonly o: ResolvedRelayOptions) {
    this.id = o.relayId;
    this.partitionCount = new PartitionCount(o.pool, o.schema, o.quotedSchema);
    this.counters = new RelayCounters(o.metrics);
    this.outage = new OutageLog(
      o.logger,
      { relayId: o.relayId, publisher: o.publisher.name },
      o.outageReminderMs,
    );
    const settings = relaySessionSettings(o.synchronousCommit);
    this.claimSession = new RelaySession(o.pool, settings, o.logger, 'claim');
    this.recordSession = new RelaySession(o.pool, settings, o.logger, 'outcome');
    this.leases = new PartitionLeases(
      o.pool,
      o.quotedSchema,
      o.relayId,
      o.leaseMs,
      () => this.partitions(),
      o.logger,
      o.metrics,
    );
    this.schedule = new LeaseSchedule(o.leaseMs);
    this.floor = new ScanFloor({ fullEveryMs: o.pollIntervalMs });
    this.idle = new IdleCadence(this.doorbell, this.leases, o.listen, o.pollIntervalMs);
    const holdBack = new HoldBack(o.pollIntervalMs, o.logger, o.relayId);
    const faults = new SequenceFaults({
      relayId: o.relayId,
      logger: o.logger,
      counters: this.counters,
      // Held heads are seen again every poll interval (the hold-back's length): forget one
      // only when several intervals passed without it.
      watch: new GapWatch({ graceMs: o.gapGraceMs, forgetMs: Math.max(60_000, 5 * o.pollIntervalMs) }),
      holdBack,
      repeatDead: relayStatement('repeat_dead', REPEAT_DEAD_SQL, o.schema, o.quotedSchema),
      bridgeGaps: relayStatement('bridge_gaps', BRIDGE_GAPS_SQL, o.schema, o.quotedSchema),
      probeSession: new RelaySession(o.pool, settings, o.logger, 'probe'),
    });
    this.faults = faults;
    const claimer = new Claimer({
      floor: this.floor,
      session: this.claimSession,
      statement: relayStatement('claim', CLAIM_SQL, o.schema, o.quotedSchema),
      relayId: o.relayId,
      batchSize: o.batchSize,
      leases: this.leases,
      holdBack,
      refused: this.refused,
      faults,
      watch: this.counters.watches.claim,
    });
    const recorder = new Recorder(
      this.recordSession,
      relayStatement(...outcomeStatement(o.history), o.schema, o.quotedSchema),
      o.relayId,
      o.logger,
      this.counters,
      o.history ? [o.publisher.name] : [],
    );
    this.history =
      o.history &&
      new HistoryMaintainer(
        o.pool,
        o.schema,
        o.history,
        o.logger,
        o.relayId,
        o.metricsSink.enabled ? o.metricsSink.gauge(...HISTORY_PARTITIONS_METRIC) : undefined,
      );
    this.pipeline = new Pipeline(claimer, recorder, holdBack);
    this.pruner = o.prune && new BackgroundPruner(o.pool, o.prune, o.logger, o.relayId, o.metricsSink);
    this.backlog = new BacklogTask({ ...o, intervalMs: o.backlogIntervalMs });
    this.batches = new BatchPublisher({
      publisher: o.publisher,
      publishTimeoutMs: o.publishTimeoutMs,
      stopping: this.abort.signal,
      counters: this.counters,
      refused: this.refused,
      policy: o,
    });
  }

  stats(): RelayStats {
    return this.counters.snapshot(this.leases.snapshot().partitions);
  }

  health(): RelayHealth {
    const since = this.outage.since;
    return {
      relayId: this.id,
      schema: this.o.schema,
      publisher: this.o.publisher.name,
      running: this.loopDone !== undefined && this.stopping === undefined,
      loopErrorsInARow: this.loopErrorsInARow,
      partitions: this.leases.size,
      brokerUnavailableSince: since === undefined ? undefined : new Date(since),
      ...this.counters.broker.health(),
      lastError: this.counters.lastError,
    };
  }

  wake(): void {
    this.doorbell.wake();
  }

  async start(): Promise<void> {
    if (this.stopping)
      throw new OutboxError('the relay was stopped; create a new one', { code: 'TXO_RELAY_STOPPED' });
    if (this.loopDone) return;
    await checkAtStart({
      partitions: this.partitionCount,
      pool: this.o.pool,
      quotedSchema: this.o.quotedSchema,
      history: this.o.history !== undefined,
      logger: this.o.logger,
      relayId: this.id,
    });
    // Today's history partition before the first outcome (see HistoryMaintainer); never throws.
    if (!this.stopping) await this.history?.start();
    // Stopped (or started by a concurrent call) while we waited: nothing more to start.
    if (this.loopDone || this.stopping) return;
    if (this.o.signal) {
      if (this.o.signal.aborted) {
        await this.stop();
        return;
      }
      this.o.signal.addEventListener('abort', this.onAbort, { once: true });
    }
    if (this.o.listen) {
      this.listener = new WakeListener(
        this.o.pool,
        wakeChannel(this.o.schema),
        () => this.wake(),
        this.o.logger,
      );
      this.listener.start();
    }
    this.renewTimer = setInterval(() => {
      this.leases.renew().catch((error: unknown) => {
        this.o.logger.warn({ err: error, relayId: this.id }, 'lease renewal failed');
      });
    }, this.schedule.everyMs);
    this.loopDone = this.loop();
    this.pruner?.start();
    this.backlog.start();
    if (this.o.metricsOption !== undefined) {
      this.unregisterBacklogGauges = registerBacklogGauges(this.o.metricsOption, this.o.pool, {
        schema: this.o.schema,
        logger: this.o.logger,
      });
    }
    this.o.logger.info({ relayId: this.id, schema: this.o.schema }, 'relay started');
  }

  stop(options: { timeout?: number } = {}): Promise<void> {
    if (!this.stopping) this.stopping = this.shutdown(options.timeout ?? 30_000);
    return this.stopping;
  }

  private readonly onAbort = (): void => {
    void this.stop();
  };

  private async shutdown(timeout: number): Promise<void> {
    this.halt = true;
    this.o.signal?.removeEventListener('abort', this.onAbort);
    this.doorbell.wake();
    if (this.loopDone) {
      const timer = setTimeout(() => this.abort.abort(new Error('relay stop deadline reached')), timeout);
      try {
        await this.loopDone;
      } finally {
        clearTimeout(timer);
      }
    }
    if (this.renewTimer) clearInterval(this.renewTimer);
    await this.faults.stopped(timeout);
    await this.history?.stop();
    await this.pruner?.stop();
    await this.backlog.stop();
    this.unregisterBacklogGauges?.();
    await this.listener?.stop();
    try {
      await this.leases.releaseAll();
    } catch (error) {
      this.o.logger.warn({ err: error }, 'could not release leases; they expire on their own');
    }
    await Promise.all([this.claimSession.release(), this.recordSession.release()]);
    if (this.o.closePublisher) {
      await this.o.publisher.close().catch((error: unknown) => {
        this.o.logger.warn({ err: error, relayId: this.id }, 'closing the publisher failed');
      });
    }
    this.o.logger.info({ relayId: this.id, ...this.counters.counts }, 'relay stopped');
  }

  private partitions(): Promise<number> {
    return this.partitionCount.get();
  }

  /**
   * The relay loop: claim → publish → record, as a pipeline ({@link Pipeline}). Around it:
   * lease rebalancing between batches, the idle cadence when a claim finds nothing, the
   * outage backoff when the broker refuses, and a backoff after an error.
   */
  private async loop(): Promise<void> {
    const pipeline = this.pipeline;
    let failures = 0;
    while (!this.halt) {
      try {
        if (!pipeline.prefetched) {
          if (this.schedule.due) await this.rebalance();
          if (this.leases.size === 0) {
            await pipeline.drain();
            await this.doorbell.sleep(Math.min(this.o.pollIntervalMs, this.schedule.everyMs));
            continue;
          }
        }
        const claimed = await pipeline.next();
        if (claimed.messages.length === 0) {
          await this.nothingClaimed(claimed);
          continue;
        }
        await this.idle.awake();
        pipeline.track(claimed);
        if (!this.halt && !this.schedule.due && claimed.scanned === this.o.batchSize) pipeline.prefetch();
        const verdict = await this.batches.publish(claimed);
        await pipeline.record(verdict);
        failures = 0;
        this.loopErrorsInARow = 0;
        const wait = this.outageWait(verdict);
        if (wait !== undefined) {
          await pipeline.drain();
          await this.doorbell.sleep(wait);
        }
      } catch (error) {
        await pipeline.drain().catch(() => undefined);
        pipeline.reset();
        this.floor.reset();
        if (this.halt) break;
        failures += 1;
        this.loopErrorsInARow = failures;
        await this.backOff(error, failures);
      }
    }
    await pipeline.drain().catch((error: unknown) => {
      this.o.logger.warn(
        { err: error, relayId: this.id },
        'last outcome not recorded; its events will be republished',
      );
    });
  }

  /** Takes this relay's fair share of partitions, with nothing in flight. */
  private async rebalance(): Promise<void> {
    await this.pipeline.drain();
    this.schedule.rebalanced(await this.leases.rebalance());
  }

  /** A claim with nothing to publish. */
  private async nothingClaimed(claimed: Claimed): Promise<void> {
    // Events held back behind the batch being recorded become claimable once it lands.
    if (this.pipeline.recording) return this.pipeline.drain();
    // Only held-back aggregates came back: they are excluded now, look again at once.
    if (claimed.scanned > 0) return;
    await this.idle.rest(this.schedule.untilDue());
  }

  /**
   * Outage backoff. The broker refused some publishes as unreachable: those events stay as they
   * were and their aggregates are left out of claims for a backoff that grows with the batches
   * refused in a row. Returns how long to wait when nothing got through; when others did (one
   * destination of several down), the loop carries on with them. A batch without refusals ends
   * the outage once no refused aggregate is outstanding.
   */
  private outageWait(verdict: Verdict): number | undefined {
    if (verdict.unavailable === 0) {
      if (this.refused.outstanding() === 0) this.outage.recovered();
      return undefined;
    }
    this.outage.refused(verdict.unavailable, this.counters.lastError);
    const delay = outageDelay(this.outage.refusedBatches, this.o.random);
    this.refused.refused(verdict.refused, Date.now() + delay);
    return verdict.delivered.length === 0 && verdict.failures.length === 0 ? delay : undefined;
  }

  /** After a loop error: new connections, a rebalance first, and a backoff growing with the errors in a row. */
  private async backOff(error: unknown, failures: number): Promise<void> {
    this.counters.lastError = redactText(errorMessage(error));
    await Promise.all([this.claimSession.release(error), this.recordSession.release(error)]);
    const delay = loopErrorDelay(failures, this.o.random);
    this.o.logger.error({ err: error, relayId: this.id, retryInMs: delay }, 'relay loop error; backing off');
    this.schedule.asap();
    await this.doorbell.sleep(delay);
  }
}
