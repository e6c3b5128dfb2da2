import { OutboxError } from '../errors.js';
import { registerBacklogGauges } from '../ops/backlog-gauges.js';
import { BacklogTask } from './backlog-task.js';
import type { RelayHealth } from './health.js';
import { HISTORY_PARTITIONS_METRIC, HistoryMaintainer } from './history.js';
import { LeaseKeeper } from './lease-keeper.js';
import { type PartitionLeaseOptions, PartitionLeases } from './leases.js';
import { type LoopParts, RelayLoop } from './loop.js';
import type { ResolvedRelayOptions } from './options.js';
import { OutageLog } from './outage.js';
import { checkAtStart, PartitionCount } from './partition-count.js';
import { BackgroundPruner } from './pruner.js';
import type { Relay } from './relay.js';
import { ReleaseStack } from './release-stack.js';
import type { RelaySource, SourceBatch } from './source.js';
import { RelayCounters, type RelayStats } from './stats.js';

/** The runtime's lifecycle hooks of a source, around its loop. */
export interface RuntimeSource<B extends SourceBatch = SourceBatch> extends RelaySource<B> {
  /** Start checks of the source's own, after the runtime's (setup mistakes said now); may throw. */
  prepare?(): Promise<void>;
  /** Starts the source's background tasks, each with its stop on `tasks` (stopped in reverse order). */
  background?(tasks: ReleaseStack): void;
  /** A lease renewal ran; `error` when it failed (logged already). */
  renewed?(error: unknown): Promise<void>;
  /** Fields of its own in the started and the stopped log line. */
  describe?(when: 'started' | 'stopped'): Record<string, unknown>;
}

/** What the runtime gives its source: the leases, counters, outage log, and the loop it runs in. */
export interface RuntimeContext extends LoopParts {
  readonly leases: PartitionLeases;
  /** Renews and rebalances the leases in the background; `asap()` after a loop error. */
  readonly keeper: Pick<LeaseKeeper, 'asap'>;
  readonly partitions: () => Promise<number>;
  readonly loop: RelayLoop;
}

export interface RuntimeParts<B extends SourceBatch> {
  readonly o: ResolvedRelayOptions;
  /** `relay` or `CDC relay`: the started and stopped log lines say which. */
  readonly kind: string;
  readonly leases?: PartitionLeaseOptions;
  readonly source: (context: RuntimeContext) => RuntimeSource<B>;
}

/**
 * The relay runtime, whatever the source: the lifecycle once — idempotent start and stop, the
 * stop deadline that aborts the publish in flight, the partition leases kept in the background,
 * the background tasks (history, pruner, backlog gauges, the source's own) on one release
 * stack stopped in reverse order, health and stats — around one {@link RelayLoop}.
 */
export class RelayRuntime<B extends SourceBatch = SourceBatch> implements Relay {
  readonly id: string;
  readonly counters: RelayCounters;
  readonly leases: PartitionLeases;
  readonly source: RuntimeSource<B>;
  readonly #o: ResolvedRelayOptions;
  readonly #kind: string;
  readonly #outage: OutageLog;
  readonly #loop: RelayLoop<B>;
  readonly #keeper: LeaseKeeper;
  readonly #partitionCount: PartitionCount;
  readonly #tasks = new ReleaseStack();
  readonly #history: HistoryMaintainer | undefined;
  readonly #pruner: BackgroundPruner | undefined;
  readonly #backlog: BacklogTask;
  /** Aborts the publish call in flight once the stop deadline passes. */
  readonly #abort = new AbortController();
  #started = false;
  #stopping: Promise<void> | undefined;

  constructor(p: RuntimeParts<B>) {
    const o = p.o;
    this.#o = o;
    this.#kind = p.kind;
    this.id = o.relayId;
    this.#partitionCount = new PartitionCount(o.pool, o.schema, o.quotedSchema);
    this.counters = new RelayCounters(o.metrics);
    this.#outage = new OutageLog(
      o.logger,
      { relayId: o.relayId, publisher: o.publisher.name },
      o.outageReminderMs,
    );
    const partitions = () => this.#partitionCount.get();
    this.leases = new PartitionLeases(
      o.pool,
      o.quotedSchema,
      o.relayId,
      o.leaseMs,
      partitions,
      o.logger,
      o.metrics,
      p.leases,
    );
    const parts: LoopParts = {
      o,
      counters: this.counters,
      outage: this.#outage,
      stopping: this.#abort.signal,
    };
    this.#loop = new RelayLoop<B>(parts);
    // Partitions acquired (work to claim) or retired (to release between batches): the loop looks now.
    this.leases.changed = () => this.#loop.bell.wake();
    this.#keeper = new LeaseKeeper({
      leases: this.leases,
      leaseMs: o.leaseMs,
      rebalance: !this.leases.exclusive,
      renewed: async (error) => this.source.renewed?.(error),
      logger: o.logger,
      relayId: o.relayId,
    });
    this.source = p.source({
      ...parts,
      leases: this.leases,
      keeper: this.#keeper,
      partitions,
      loop: this.#loop as RelayLoop,
    });
    this.#history =
      o.history &&
      new HistoryMaintainer(
        o.pool,
        o.schema,
        o.history,
        o.logger,
        o.relayId,
        o.metricsSink.enabled ? o.metricsSink.gauge(...HISTORY_PARTITIONS_METRIC) : undefined,
      );
    this.#pruner = o.prune && new BackgroundPruner(o.pool, o.prune, o.logger, o.relayId, o.metricsSink);
    this.#backlog = new BacklogTask({ ...o, intervalMs: o.backlogIntervalMs });
  }

  stats(): RelayStats {
    return this.counters.snapshot(this.leases.snapshot().partitions);
  }

  health(): RelayHealth {
    const since = this.#outage.since;
    return {
      relayId: this.id,
      schema: this.#o.schema,
      publisher: this.#o.publisher.name,
      running: this.#started && this.#stopping === undefined,
      loopErrorsInARow: this.#loop.errors.inARow,
      partitions: this.leases.size,
      brokerUnavailableSince: since === undefined ? undefined : new Date(since),
      ...this.counters.broker.health(),
      lastError: this.counters.lastError,
    };
  }

  wake(): void {
    this.#loop.bell.wake();
  }

  async start(): Promise<void> {
    const o = this.#o;
    if (this.#stopping)
      throw new OutboxError('the relay was stopped; create a new one', { code: 'TXO_RELAY_STOPPED' });
    if (this.#started) return;
    await checkAtStart({
      partitions: this.#partitionCount,
      pool: o.pool,
      quotedSchema: o.quotedSchema,
      history: o.history !== undefined,
      logger: o.logger,
      relayId: this.id,
    });
    await this.source.prepare?.();
    // Today's history partition before the first outcome (see HistoryMaintainer); never throws.
    if (!this.#stopping && this.#history) {
      await this.#history.start();
      this.#tasks.push(() => this.#history?.stop());
    }
    // Stopped (or started by a concurrent call) while we waited: nothing more to start.
    if (this.#started || this.#stopping) return;
    if (o.signal) {
      if (o.signal.aborted) {
        await this.stop();
        return;
      }
      o.signal.addEventListener('abort', this.#onAbort, { once: true });
    }
    this.#started = true;
    this.source.background?.(this.#tasks);
    this.#keeper.start();
    this.#tasks.push(() => this.#keeper.stop());
    this.#loop.start(this.source);
    this.#pruner?.start();
    this.#tasks.push(() => this.#pruner?.stop());
    this.#backlog.start();
    this.#tasks.push(() => this.#backlog.stop());
    if (o.metricsOption !== undefined)
      this.#tasks.push(
        registerBacklogGauges(o.metricsOption, o.pool, { schema: o.schema, logger: o.logger }),
      );
    o.logger.info(
      { relayId: this.id, schema: o.schema, ...this.source.describe?.('started') },
      `${this.#kind} started`,
    );
  }

  stop(options: { timeout?: number } = {}): Promise<void> {
    if (!this.#stopping) this.#stopping = this.#shutdown(options.timeout ?? 30_000);
    return this.#stopping;
  }

  readonly #onAbort = (): void => {
    void this.stop();
  };

  async #shutdown(timeout: number): Promise<void> {
    const o = this.#o;
    o.signal?.removeEventListener('abort', this.#onAbort);
    if (this.#loop.running) {
      const timer = setTimeout(() => this.#abort.abort(new Error('relay stop deadline reached')), timeout);
      try {
        await this.#loop.stop();
      } finally {
        clearTimeout(timer);
      }
    }
    await this.#tasks.releaseAll();
    await this.source.close(timeout);
    try {
      await this.leases.releaseAll();
    } catch (error) {
      o.logger.warn({ err: error }, 'could not release leases; they expire on their own');
    }
    if (o.closePublisher) {
      await o.publisher.close().catch((error: unknown) => {
        o.logger.warn({ err: error, relayId: this.id }, 'closing the publisher failed');
      });
    }
    o.logger.info(
      { relayId: this.id, ...this.counters.counts, ...this.source.describe?.('stopped') },
      `${this.#kind} stopped`,
    );
  }
}
