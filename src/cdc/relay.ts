import { errorMessage, OutboxError } from '../errors.js';
import { registerBacklogGauges } from '../ops/backlog-gauges.js';
import { redactText } from '../redact.js';
import { BacklogTask } from '../relay/backlog-task.js';
import { loopErrorDelay, outageDelay } from '../relay/backoff.js';
import type { Claimed } from '../relay/claim/claim.js';
import { LOOP_ERRORS_NOT_READY, type RelayHealth } from '../relay/health.js';
import { HISTORY_PARTITIONS_METRIC, HistoryMaintainer } from '../relay/history.js';
import { PartitionLeases } from '../relay/leases.js';
import { OutageLog, RefusedAggregates } from '../relay/outage.js';
import { outcomeStatement } from '../relay/outcome-sql.js';
import { checkAtStart, PartitionCount } from '../relay/partition-count.js';
import type { Relay } from '../relay/relay.js';
import { BackgroundPruner } from '../relay/pruner.js';
import { BatchPublisher } from '../relay/publish-batch.js';
import { Recorder } from '../relay/record.js';
import { RelaySession, relaySessionSettings, relayStatement } from '../relay/session.js';
import { RelayCounters, type RelayStats } from '../relay/stats.js';
import { type Failure, MAX_ERROR_CHARS, type Verdict } from '../relay/verdicts.js';
import { Doorbell } from '../relay/wakeup.js';
import { withSchema } from '../schema/identifiers.js';
import { AckTracker, nothingInFlight } from './acks.js';
import { type Fence, FencedError, Handover, type HandoverRow, type ProgressRow } from './handover.js';
import { CAUGHT_UP_SQL, HANDOVER_SQL } from './handover-sql.js';
import { Heartbeat } from './heartbeat.js';
import { formatLsn, type Lsn, parseLsn } from './lsn.js';
import { type CdcRelayOptions, type ResolvedCdcRelayOptions, resolveCdcRelayOptions } from './options.js';
import { PollPath } from './poll-path.js';
import { ReplicationStream } from './replication.js';
import {
  CDC_SLOT_LOST,
  type CdcNames,
  cdcSlotStatus,
  checkCdc,
  ensureCdcSlot,
  resolveCdcNames,
  takeOverSlot,
} from './setup.js';
import { RepeatedErrorLog, StreamTrouble } from './standby.js';
import { CdcMetrics, type CdcStats, type ReconnectReason } from './stats.js';
import { handoverPrefix, OwnTransactions, StreamBatcher, type StreamEvent } from './stream-batch.js';
import { RefusalBound, StreamGate } from './stream-gate.js';
import { loadWalKey, WalReader, WalRefusals } from './wal-auth.js';
import { eventsPrefix, heartbeatPrefix } from './wal-message.js';

export type { CdcRelayOptions } from './options.js';
export type { CdcStats } from './stats.js';

/** A CDC relay: the polling relay's interface, its stats with the stream's. */
export interface CdcRelay extends Relay {
  stats(): RelayStats & { cdc: CdcStats };
}

/**
 * Creates a CDC relay: holds every partition lease (the fence), streams the slot's inserts into
 * the events table and WAL-mode messages, publishes them in per-aggregate order, and confirms the
 * slot past what is settled. Aggregates with a failure or a scheduled event, and rows left in
 * the table at start that will not stream again, are handed over to a polling path inside the
 * relay (see {@link Handover}).
 */
export function createCdcRelay(options: CdcRelayOptions): CdcRelay {
  return new StreamingRelay(resolveCdcRelayOptions(options));
}

/** `cdc_state` (migration 11): the stream's position and lag, for `tx-outbox status`. */
const CDC_STATE_SQL = `
INSERT INTO {{schema}}.cdc_state AS s (slot_name, relay_id, confirmed_lsn, lag_seconds, measured_at)
VALUES ($1, $2, $3::pg_lsn, $4, now())
ON CONFLICT (slot_name) DO UPDATE
SET relay_id = excluded.relay_id, confirmed_lsn = excluded.confirmed_lsn,
    lag_seconds = excluded.lag_seconds, measured_at = excluded.measured_at`;

/** The leases went to another relay while streaming: the stream stops, the relay stands by. */
class LeasesLost extends OutboxError {
  constructor() {
    super('partition leases lost: this relay stops streaming and stands by', { code: 'TXO_CDC_LEASES_LOST' });
  }
}

/** One stream's state, from its start to its failure (or the relay's stop). */
interface StreamSession {
  readonly stream: ReplicationStream;
  readonly tracker: AckTracker;
  readonly batcher: StreamBatcher;
  /** Events read and not taken yet, in stream order. */
  queue: StreamEvent[];
  /** Events read and not settled yet. */
  unsettled: number;
  /** Changes the reader took from the stream and read into units (see {@link nothingInFlight}). */
  read: number;
  /** The reader's or a recording's failure: ends the session. */
  failure: unknown;
  /** The outcome being recorded (one at a time; the next batch publishes meanwhile). */
  recording: Promise<void> | undefined;
  refusedBatches: number;
  /** The aggregates polled when the session started, and where the stream has caught up with them. */
  readonly polledAtStart: readonly string[];
  readonly catchUp: bigint;
  /**
   * The stream settled everything committed before the polled set was read: P may claim. Before,
   * a WAL-mode event of a polled aggregate may still be on its way into the table (a reconnect
   * streams again what was not confirmed), and P would publish the aggregate's later rows first.
   */
  caughtUp: boolean;
  catchingUp: boolean;
  /** Aggregates refused as unavailable past the {@link RefusalBound}: handed over at the next take. */
  readonly evicted: Set<string>;
}

/** Refused batches after which one aggregate refused while others are delivered leaves the stream. */
const MAX_REFUSED_BATCHES = 3;

class StreamingRelay implements CdcRelay {
  readonly id: string;
  private readonly b;
  private readonly leases: PartitionLeases;
  private readonly counters: RelayCounters;
  private readonly outage: OutageLog;
  private readonly refused = new RefusedAggregates();
  private readonly batches: BatchPublisher;
  private readonly recorder: Recorder;
  private readonly recordSession: RelaySession;
  /** Handovers commit with synchronous_commit on: the slot moves past them once they commit. */
  private readonly handoverSession: RelaySession;
  private readonly handover: Handover;
  private readonly poll: PollPath;
  private readonly own = new OwnTransactions();
  /** Caller versions: the stream publishes an aggregate's next sequence only (see {@link StreamGate}). */
  private readonly gate: StreamGate;
  private readonly refusals: RefusalBound;
  private readonly history: HistoryMaintainer | undefined;
  private readonly backlog: BacklogTask;
  private readonly pruner: BackgroundPruner | undefined;
  private readonly heartbeat: Heartbeat;
  private readonly metrics: CdcMetrics;
  /** WAL-mode messages refused (not authenticated, format 1 where not read): counted, logged. */
  private readonly walRefusals: WalRefusals;
  private readonly abort = new AbortController();
  /** Rings on new events, settled batches, lost leases and stop. */
  private readonly bell = new Doorbell();
  /** Rings when the reader may read again (below maxInFlight) or must stop. */
  private readonly readerBell = new Doorbell();
  /** Table row ids the stream has in flight (published, outcome not recorded). */
  private readonly inFlightIds = new Set<string>();
  /** Events per aggregate the stream has in flight. */
  private readonly busy = new Map<string, number>();
  /** Aggregates whose handover has not committed yet. */
  private readonly handingOver = new Map<string, number>();
  private session: StreamSession | undefined;
  private loopDone: Promise<void> | undefined;
  private stopping: Promise<void> | undefined;
  private halt = false;
  private loopErrorsInARow = 0;
  private renewTimer: NodeJS.Timeout | undefined;
  private readonly partitionCount: PartitionCount;
  private stateTimer: NodeJS.Timeout | undefined;
  private unregisterBacklogGauges: (() => void) | undefined;
  private readonly cdc = { reconnects: 0, handovers: 0, confirmed: 0n, server: 0n };
  /** The slot as last sampled from pg_replication_slots ({@link sampleSlot}). */
  private slotSample = { lagBytes: 0, retainedBytes: 0 };
  /** The last sample failed (logged once a streak). */
  private sampleFailing = false;
  private readonly stateSql: string;
  private readonly caughtUpSql: string;
  private readonly trouble: StreamTrouble;
  private readonly loopLog: RepeatedErrorLog;
  /** The slot (given, or this database's default) and publication, resolved by start(). */
  private names: CdcNames | undefined;
  /** The slot was lost while running: re-run the start checks before the next attempt. */
  private slotLost = false;

  constructor(private readonly o: ResolvedCdcRelayOptions) {
    const b = o.base;
    this.b = b;
    this.partitionCount = new PartitionCount(b.pool, b.schema, b.quotedSchema);
    this.id = b.relayId;
    this.counters = new RelayCounters(b.metrics);
    this.metrics = new CdcMetrics(b.metricsSink);
    this.walRefusals = new WalRefusals(b.logger, { relayId: b.relayId, slot: o.slot }, this.metrics.refused);
    this.outage = new OutageLog(
      b.logger,
      { relayId: b.relayId, publisher: b.publisher.name },
      b.outageReminderMs,
    );
    const settings = relaySessionSettings(b.synchronousCommit);
    this.recordSession = new RelaySession(b.pool, settings, b.logger, 'cdc-outcome');
    this.handoverSession = new RelaySession(b.pool, relaySessionSettings('on'), b.logger, 'cdc-handover');
    this.leases = new PartitionLeases(
      b.pool,
      b.quotedSchema,
      b.relayId,
      b.leaseMs,
      () => this.partitions(),
      b.logger,
      b.metrics,
      { exclusive: true },
    );
    this.handover = new Handover(
      b.quotedSchema,
      withSchema(HANDOVER_SQL, b.quotedSchema),
      handoverPrefix(b.schema),
      b.logger,
    );
    this.recorder = new Recorder(
      this.recordSession,
      relayStatement(...outcomeStatement(b.history), b.schema, b.quotedSchema),
      b.relayId,
      b.logger,
      this.counters,
      b.history ? [b.publisher.name] : [],
    );
    this.batches = new BatchPublisher({
      publisher: b.publisher,
      publishTimeoutMs: b.publishTimeoutMs,
      stopping: this.abort.signal,
      counters: this.counters,
      refused: this.refused,
      policy: b,
    });
    this.poll = new PollPath({
      o: b,
      leases: this.leases,
      counters: this.counters,
      outage: this.outage,
      handover: this.handover,
      streamInFlight: () => [...this.inFlightIds],
      handingOver: (key) => this.handingOver.has(key) || this.busy.has(key),
      stopping: this.abort.signal,
    });
    this.history =
      b.history &&
      new HistoryMaintainer(
        b.pool,
        b.schema,
        b.history,
        b.logger,
        b.relayId,
        b.metricsSink.enabled ? b.metricsSink.gauge(...HISTORY_PARTITIONS_METRIC) : undefined,
      );
    this.backlog = new BacklogTask({ ...b, intervalMs: b.backlogIntervalMs });
    this.pruner = b.prune && new BackgroundPruner(b.pool, b.prune, b.logger, b.relayId, b.metricsSink);
    this.heartbeat = new Heartbeat({
      pool: b.pool,
      prefix: heartbeatPrefix(b.schema),
      intervalMs: o.heartbeatMs,
      logger: b.logger,
    });
    this.gate = new StreamGate(b.quotedSchema);
    this.refusals = new RefusalBound(MAX_REFUSED_BATCHES, b.outageReminderMs);
    this.stateSql = withSchema(CDC_STATE_SQL, b.quotedSchema);
    this.caughtUpSql = withSchema(CAUGHT_UP_SQL, b.quotedSchema);
    this.trouble = new StreamTrouble(b.leaseMs);
    this.loopLog = new RepeatedErrorLog(b.logger, { relayId: b.relayId });
  }

  stats(): RelayStats & { cdc: CdcStats } {
    return { ...this.counters.snapshot(this.leases.snapshot().partitions), cdc: this.cdcStats() };
  }

  private cdcStats(): CdcStats {
    const confirmed = this.cdc.confirmed;
    const server = this.cdc.server;
    const oldest = this.session?.tracker.oldestPendingCommitTime;
    return {
      slot: this.names?.slot ?? this.o.slot,
      streaming: this.session !== undefined,
      confirmedLsn: confirmed > 0n ? formatLsn(confirmed) : undefined,
      serverLsn: server > 0n ? formatLsn(server) : undefined,
      lagBytes: this.slotSample.lagBytes,
      retainedBytes: this.slotSample.retainedBytes,
      lagSeconds: oldest ? Math.max(0, (Date.now() - oldest.getTime()) / 1000) : 0,
      reconnects: this.cdc.reconnects,
      handovers: this.cdc.handovers,
      polled: this.handover.size,
      refusedMessages: this.walRefusals.total,
    };
  }

  health(): RelayHealth {
    const since = this.outage.since;
    return {
      relayId: this.id,
      schema: this.b.schema,
      publisher: this.b.publisher.name,
      running: this.loopDone !== undefined && this.stopping === undefined,
      loopErrorsInARow: this.loopErrorsInARow,
      partitions: this.leases.size,
      brokerUnavailableSince: since === undefined ? undefined : new Date(since),
      ...this.counters.broker.health(),
      lastError: this.counters.lastError,
    };
  }

  wake(): void {
    this.bell.wake();
  }

  async start(): Promise<void> {
    if (this.stopping)
      throw new OutboxError('the relay was stopped; create a new one', { code: 'TXO_RELAY_STOPPED' });
    if (this.loopDone) return;
    const b = this.b;
    await checkAtStart({
      partitions: this.partitionCount,
      pool: b.pool,
      quotedSchema: b.quotedSchema,
      history: b.history !== undefined,
      logger: b.logger,
      relayId: this.id,
    });
    // Setup mistakes (wal_level, a lost slot) are for the operator: say so now, never skip.
    const names = await resolveCdcNames(b.pool, {
      schema: b.schema,
      slot: this.o.slot,
      publication: this.o.publication,
    });
    await checkCdc(b.pool, names, b.logger);
    await ensureCdcSlot(b.pool, names);
    this.names = names;
    // The WAL key (migration 12, the relay role's grant): a setup mistake is said now.
    await loadWalKey(b.pool, b.schema, b.quotedSchema);
    if (this.o.acceptWalFormat1) {
      b.logger.warn(
        { relayId: this.id, slot: names.slot },
        'acceptWalFormat1: WAL-mode messages of format 1 (no MAC) are published, so any database login can publish events; turn it off once every producer runs this tx-outbox (docs/cdc.md, Upgrading WAL mode)',
      );
    }
    if (!this.stopping) await this.history?.start();
    if (this.loopDone || this.stopping) return;
    if (b.signal) {
      if (b.signal.aborted) {
        await this.stop();
        return;
      }
      b.signal.addEventListener('abort', this.onAbort, { once: true });
    }
    this.renewTimer = setInterval(() => void this.renew(), Math.max(100, Math.floor(b.leaseMs / 3)));
    this.stateTimer = setInterval(() => void this.writeState(), b.backlogIntervalMs);
    this.stateTimer.unref();
    void this.sampleSlot();
    this.loopDone = this.loop();
    this.backlog.start();
    this.pruner?.start();
    this.heartbeat.start();
    if (b.metricsOption !== undefined) {
      this.unregisterBacklogGauges = registerBacklogGauges(b.metricsOption, b.pool, {
        schema: b.schema,
        logger: b.logger,
      });
    }
    b.logger.info({ relayId: this.id, schema: b.schema, slot: names.slot }, 'CDC relay started');
  }

  stop(options: { timeout?: number } = {}): Promise<void> {
    if (!this.stopping) this.stopping = this.shutdown(options.timeout ?? 30_000);
    return this.stopping;
  }

  private readonly onAbort = (): void => {
    void this.stop();
  };

  private async shutdown(timeout: number): Promise<void> {
    const b = this.b;
    this.halt = true;
    b.signal?.removeEventListener('abort', this.onAbort);
    this.bell.wake();
    this.readerBell.wake();
    if (this.loopDone) {
      const timer = setTimeout(() => this.abort.abort(new Error('relay stop deadline reached')), timeout);
      try {
        await this.loopDone;
      } finally {
        clearTimeout(timer);
      }
    }
    if (this.renewTimer) clearInterval(this.renewTimer);
    if (this.stateTimer) clearInterval(this.stateTimer);
    await this.poll.close(timeout);
    await this.heartbeat.stop();
    await this.history?.stop();
    await this.backlog.stop();
    await this.pruner?.stop();
    this.unregisterBacklogGauges?.();
    try {
      await this.leases.releaseAll();
    } catch (error) {
      b.logger.warn({ err: error }, 'could not release leases; they expire on their own');
    }
    await Promise.all([this.recordSession.release(), this.handoverSession.release()]);
    if (b.closePublisher) {
      await b.publisher.close().catch((error: unknown) => {
        b.logger.warn({ err: error, relayId: this.id }, 'closing the publisher failed');
      });
    }
    b.logger.info({ relayId: this.id, ...this.counters.counts, ...this.cdcStats() }, 'CDC relay stopped');
  }

  /** The names start() resolved: the loop, the stream and the state writes run only after it. */
  private resolved(): CdcNames {
    if (this.names === undefined)
      throw new OutboxError('the CDC relay has not started', { code: 'TXO_RELAY_NOT_STARTED' });
    return this.names;
  }

  private partitions(): Promise<number> {
    return this.partitionCount.get();
  }

  private async holdsAll(): Promise<boolean> {
    return this.leases.size > 0 && this.leases.size === (await this.partitions());
  }

  private async renew(): Promise<void> {
    try {
      await this.leases.renew();
    } catch (error) {
      this.b.logger.warn({ err: error, relayId: this.id }, 'lease renewal failed');
      if ((error as { code?: unknown }).code === CANNOT_CONNECT_NOW) this.serverGoingDown(error);
    }
    if (this.session && !(await this.holdsAll().catch(() => false))) this.bell.wake();
  }

  /**
   * PostgreSQL refuses connections (shutting down): the stream ends now. A shutdown waits for the
   * walsender, and the walsender until the relay confirms all it was sent; with events in flight
   * that the relay cannot settle (a broker that is down) the database would stay down as long as
   * the broker. What was not confirmed streams again once the server is back.
   */
  private serverGoingDown(cause: unknown): void {
    const session = this.session;
    if (session === undefined || session.failure !== undefined) return;
    session.failure = new OutboxError(
      'PostgreSQL refuses connections (shutting down): the replication stream ends and starts again ' +
        'from the confirmed position once the server is back',
      { code: 'TXO_CDC_SERVER_DOWN', retryable: true, cause },
    );
    void session.stream.close();
    this.bell.wake();
    this.readerBell.wake();
  }

  private async writeState(): Promise<void> {
    await this.sampleSlot();
    const stats = this.cdcStats();
    this.metrics.lagSeconds(stats.lagSeconds);
    if (!this.session || stats.confirmedLsn === undefined) return;
    await this.b.pool
      .query(this.stateSql, [this.resolved().slot, this.id, stats.confirmedLsn, stats.lagSeconds])
      .catch((error: unknown) => {
        // Before migration 11 there is no cdc_state: nothing to write, quietly.
        if ((error as { code?: unknown }).code !== '42P01')
          this.b.logger.warn({ err: error, relayId: this.id }, 'could not write cdc_state');
      });
  }

  /**
   * The slot's lag and retained WAL as PostgreSQL counts them (`cdc status`'s reading, every
   * `backlogIntervalMs`, standby or streaming): what the relay knows from its stream is only what
   * the server sent it, not the WAL the slot holds back.
   */
  private async sampleSlot(): Promise<void> {
    try {
      // Before start() resolved the names, cdcSlotStatus resolves the default itself.
      const status = await cdcSlotStatus(this.b.pool, {
        schema: this.b.schema,
        slot: this.names?.slot ?? this.o.slot,
        publication: this.o.publication,
      });
      this.sampleFailing = false;
      if (!status.exists) return;
      this.slotSample = { lagBytes: status.lagBytes ?? 0, retainedBytes: status.retainedBytes ?? 0 };
      this.metrics.slot(this.slotSample.lagBytes, this.slotSample.retainedBytes);
    } catch (error) {
      if (!this.sampleFailing)
        this.b.logger.warn(
          { err: error, relayId: this.id },
          'could not read the slot lag (pg_replication_slots)',
        );
      this.sampleFailing = true;
    }
  }

  /**
   * Standby until every partition is ours; then take the slot over, read the polled set, and
   * stream until the stream fails, the leases go, or the relay stops. After a failure: back off
   * and start over from the slot's confirmed position (what was not confirmed comes again).
   */
  private async loop(): Promise<void> {
    const b = this.b;
    let failures = 0;
    const names = this.resolved();
    while (!this.halt) {
      try {
        if (this.slotLost) {
          await checkCdc(b.pool, names);
          this.slotLost = false;
        }
        await this.leases.rebalance();
        if (!(await this.holdsAll())) {
          await this.bell.sleep(Math.max(100, Math.floor(b.leaseMs / 3)));
          continue;
        }
        // The slot's holder, if any, is a relay that lost the leases: end its stream.
        if (!(await this.leases.verifyAll())) continue;
        await takeOverSlot(b.pool, names.slot, { logger: b.logger });
        const start = await this.handover.rebuild(b.pool);
        const catchUp = start.polled.length > 0 || start.unknown > 0 ? await this.catchUpMark() : 0n;
        await this.streamOnce(start.polled, catchUp, () => {
          failures = 0;
          this.loopErrorsInARow = 0;
        });
      } catch (error) {
        if (this.halt) break;
        failures += 1;
        this.loopErrorsInARow = failures;
        this.cdc.reconnects += 1;
        this.metrics.reconnect(reasonOf(error));
        this.counters.lastError = redactText(errorMessage(error));
        await Promise.all([this.recordSession.release(error), this.handoverSession.release(error)]);
        if (error instanceof LeasesLost || error instanceof FencedError) this.leases.forget();
        if ((error as { code?: unknown }).code === CDC_SLOT_LOST) {
          await this.onSlotLost(names, error);
          continue;
        }
        // Lost leases are a standby's business, not a stream that cannot run.
        if (!(error instanceof LeasesLost || error instanceof FencedError)) this.trouble.failed();
        if (this.trouble.yield) {
          const standbyMs = this.trouble.standbyMs(b.random);
          this.loopLog.report(error, 'CDC stream cannot run: released every lease, standing by', {
            slot: names.slot,
            standbyMs,
          });
          await this.releaseLeases();
          await this.pause(standbyMs);
          continue;
        }
        const delay = loopErrorDelay(failures, b.random);
        this.loopLog.report(error, 'CDC stream ended; reconnecting', { slot: names.slot, retryInMs: delay });
        await this.bell.sleep(delay);
      }
    }
  }

  /**
   * The slot was invalidated (PostgreSQL removed WAL it needed): nothing can stream from it again.
   * Say so with the start check's full message (what may be missing, how to recover), give the
   * leases back (the polling relay of the recovery needs them), and check again every minute.
   */
  private async onSlotLost(names: CdcNames, error: unknown): Promise<void> {
    const full = await checkCdc(this.b.pool, names).then(
      () => error,
      (e: unknown) => e,
    );
    this.counters.lastError = redactText(errorMessage(full));
    this.loopLog.report(full, 'CDC slot lost: not streaming; leases released; checking again every minute', {
      slot: names.slot,
      retryInMs: SLOT_LOST_RETRY_MS,
    });
    this.slotLost = true;
    this.loopErrorsInARow = Math.max(this.loopErrorsInARow, LOOP_ERRORS_NOT_READY);
    await this.releaseLeases();
    await this.pause(SLOT_LOST_RETRY_MS);
  }

  /** Sleeps `ms` whatever rings the bell meanwhile (new events), unless the relay stops. */
  private async pause(ms: number): Promise<void> {
    const until = performance.now() + ms;
    for (let left = ms; !this.halt && left > 0; left = until - performance.now()) await this.bell.sleep(left);
  }

  private async releaseLeases(): Promise<void> {
    try {
      await this.leases.releaseAll();
    } catch (error) {
      this.leases.forget();
      this.b.logger.warn(
        { err: error, relayId: this.id },
        'could not release leases; they expire on their own',
      );
    }
  }

  /**
   * Where the stream has caught up with the polled set just read: the WAL insert position, with a
   * heartbeat written after it (so a unit at or past it comes by even on an idle database).
   */
  private async catchUpMark(): Promise<bigint> {
    const { rows } = await this.b.pool.query<{ lsn: string }>(
      'SELECT pg_current_wal_insert_lsn()::text AS lsn',
    );
    await this.b.pool.query(`SELECT pg_logical_emit_message(false, $1::text, ''::text)`, [
      heartbeatPrefix(this.b.schema),
    ]);
    return parseLsn(rows[0]!.lsn);
  }

  /** One stream, start to end; `healthy` is called once it runs. */
  private async streamOnce(polled: readonly string[], catchUp: bigint, healthy: () => void): Promise<void> {
    const b = this.b;
    const slot = this.resolved().slot;
    const reader = await this.walReader();
    const stream = new ReplicationStream({
      connection: this.o.connection,
      slot,
      publication: this.o.publication,
      // From what this relay knows is settled, when that is past the slot's confirmed_flush (the
      // server honours the later of the two): fewer duplicates after a walsender was killed.
      ...(this.cdc.confirmed > 0n ? { startLsn: this.cdc.confirmed } : {}),
      statusIntervalMs: this.o.statusIntervalMs,
      silenceTimeoutMs: this.o.silenceTimeoutMs,
      // The stream's own read-ahead is bounded like the relay's: decoded changes waiting for the
      // reader cost memory as unsettled events do (a 10,000 default each was ~100 MB of RSS).
      highWaterMark: this.o.maxInFlight,
      // Called only once the stream runs, after `session` below is set.
      onKeepalive: (walEnd) => this.keepalive(session, walEnd),
      logger: b.logger,
    });
    const tracker = new AckTracker();
    const session: StreamSession = {
      stream,
      tracker,
      batcher: new StreamBatcher(b.schema, eventsPrefix(b.schema), tracker, this.own, reader),
      queue: [],
      unsettled: 0,
      read: 0,
      failure: undefined,
      recording: undefined,
      refusedBatches: 0,
      polledAtStart: polled,
      catchUp,
      caughtUp: catchUp === 0n,
      catchingUp: false,
      evicted: new Set(),
    };
    this.refusals.clear();
    try {
      // Read before the stream starts: a WAL-mode event past it was never streamed before.
      const { rows } = await b.pool.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn');
      this.gate.clear(parseLsn(rows[0]!.lsn));
      await stream.start();
      this.cdc.confirmed = stream.confirmed;
      this.session = session;
      this.metrics.streaming(true);
      this.poll.start(() => session.caughtUp);
      healthy();
      b.logger.info({ relayId: this.id, slot, from: formatLsn(stream.confirmed) }, 'streaming');
      const reader = this.read(session);
      try {
        await this.publishLoop(session);
      } finally {
        session.failure ??= new Error('stream session ended');
        this.readerBell.wake();
        await session.recording?.catch(() => undefined);
        await stream.close();
        await reader;
      }
    } finally {
      this.session = undefined;
      this.metrics.streaming(false);
      await this.poll.stop();
      await stream.close();
      this.inFlightIds.clear();
      this.busy.clear();
      this.handingOver.clear();
    }
  }

  /** The WAL-mode messages' reader of one stream: the key read again for it (src/cdc/wal-auth.ts). */
  private async walReader(): Promise<WalReader> {
    const { key, utf8 } = await loadWalKey(this.b.pool, this.b.schema, this.b.quotedSchema);
    const partitions = await this.partitions();
    return new WalReader(key, { partitions, utf8 }, this.o.acceptWalFormat1, this.walRefusals);
  }

  /** The reader: stream changes into the queue, paused at maxInFlight unsettled events. */
  private async read(session: StreamSession): Promise<void> {
    try {
      while (!this.halt && session.failure === undefined) {
        if (session.unsettled >= this.o.maxInFlight) {
          await this.readerBell.sleep(100);
          continue;
        }
        const changes = await session.stream.next(this.b.batchSize);
        if (session.failure !== undefined) return;
        if (changes.length > 0) {
          this.trouble.delivered();
          this.loopLog.cleared();
        }
        this.cdc.server = session.stream.serverLsn;
        const events = session.batcher.add(changes);
        session.read += changes.length;
        session.unsettled += events.length;
        for (const e of events) session.queue.push(e);
        this.confirm(session);
        if (events.length > 0) this.bell.wake();
      }
    } catch (error) {
      session.failure ??= error;
      this.bell.wake();
    }
  }

  private confirm(session: StreamSession): void {
    const lsn = session.tracker.confirmable();
    if (lsn !== undefined) this.advance(session, lsn);
  }

  /**
   * A keepalive's WAL end, confirmed when nothing is in flight (as pg_recvlogical does): the WAL
   * up to it holds nothing unsettled of the relay's, and PostgreSQL's shutdown waits until the
   * client confirms all it was sent, so a relay that confirmed only its own events' ends would
   * hold a restart of the database up for as long as it stays connected.
   */
  private keepalive(session: StreamSession, walEnd: Lsn): void {
    if (session.failure !== undefined) return;
    this.confirm(session);
    const idle = nothingInFlight({
      buffered: session.stream.buffered,
      handedOut: session.stream.handedOut,
      read: session.read,
      pendingUnits: session.tracker.pendingUnits,
      unsettled: session.unsettled,
    });
    if (idle) this.advance(session, walEnd);
    this.cdc.server = session.stream.serverLsn;
  }

  /** The slot may be confirmed up to `lsn`: the stream's next status update says so. */
  private advance(session: StreamSession, lsn: Lsn): void {
    session.stream.confirm(lsn);
    if (lsn > this.cdc.confirmed) this.cdc.confirmed = lsn;
    if (!session.caughtUp && !session.catchingUp && lsn >= session.catchUp) {
      session.catchingUp = true;
      // At once, before the next batch is taken: what is still unknown never streams again.
      const fromUnknown = this.handover.caughtUp();
      this.caughtUp(session, fromUnknown).then(
        () => {
          session.caughtUp = true;
          this.poll.wake();
        },
        (error: unknown) => {
          session.failure ??= error;
          this.bell.wake();
        },
      );
    }
  }

  /** See {@link CAUGHT_UP_SQL}. */
  private async caughtUp(session: StreamSession, fromUnknown: readonly string[]): Promise<void> {
    const { partitions, epochs } = this.leases.snapshot();
    const { rowCount } = await this.b.pool.query(this.caughtUpSql, [
      this.id,
      partitions,
      epochs,
      partitions.length,
      [...session.polledAtStart, ...fromUnknown],
    ]);
    this.b.logger.debug(
      { relayId: this.id, raised: rowCount, fromUnknown: fromUnknown.length },
      'stream caught up with the start set',
    );
  }

  private settle(session: StreamSession, events: readonly StreamEvent[]): void {
    for (const e of events) session.tracker.settle(e.unit);
    session.unsettled -= events.length;
    this.confirm(session);
    this.readerBell.wake();
  }

  private track(events: readonly StreamEvent[], delta: 1 | -1): void {
    for (const e of events) {
      const n = (this.busy.get(e.key) ?? 0) + delta;
      if (n > 0) this.busy.set(e.key, n);
      else this.busy.delete(e.key);
      if (e.via === 'table') {
        if (delta > 0) this.inFlightIds.add(e.message.id);
        else this.inFlightIds.delete(e.message.id);
      }
    }
  }

  /**
   * The stream's publish loop: take the next batch from the queue (handing over what is the
   * polling path's), publish it through the ordering gate's waves, and record its outcome while
   * the next batch publishes. Ends by throwing (the session failed, the leases went) or at stop.
   */
  private async publishLoop(session: StreamSession): Promise<void> {
    const b = this.b;
    while (!this.halt) {
      if (session.failure !== undefined) throw session.failure;
      if (!(await this.holdsAll())) throw new LeasesLost();
      await this.lookUp(session);
      const { batch, handovers, progress } = this.take(session);
      if (handovers.length > 0) await this.handOver(session, handovers, progress);
      if (batch.length === 0) {
        if (handovers.length === 0) await this.bell.sleep(b.pollIntervalMs);
        continue;
      }
      this.track(batch, 1);
      const { partitions, epochs } = this.leases.snapshot();
      const claimed: Claimed = {
        messages: batch.map((e) => e.message),
        scanned: batch.length,
        partitions,
        epochs,
      };
      let verdict: Verdict;
      try {
        verdict = await this.batches.publish(claimed);
      } catch (error) {
        this.track(batch, -1);
        throw error;
      }
      const wait = this.judged(session, batch, verdict);
      await session.recording;
      if (session.failure !== undefined) throw session.failure;
      const recording = this.record(session, batch, verdict, { relayId: this.id, partitions, epochs });
      recording.catch((error: unknown) => {
        session.failure ??= error;
        this.bell.wake();
      });
      session.recording = recording;
      if (wait !== undefined) {
        await session.recording.catch(() => undefined);
        await this.bell.sleep(wait);
      }
    }
  }

  /**
   * The next batch: events in stream order, at most batchSize, each aggregate's events in order.
   * An event the table has already (or P delivered) is settled; one of a polled aggregate, or
   * not publishable by the stream, is handed over — but only once nothing earlier of its
   * aggregate is in flight in the stream, so P takes up exactly where the stream left off.
   */
  private take(session: StreamSession): {
    batch: StreamEvent[];
    handovers: StreamEvent[];
    progress: Map<string, number>;
  } {
    const batch: StreamEvent[] = [];
    const handovers: StreamEvent[] = [];
    const progress = new Map<string, number>();
    const skipped: StreamEvent[] = [];
    const keep: StreamEvent[] = [];
    const blocked = new Set<string>();
    const inBatch = new Set<string>();
    const waiting = new Set(this.refused.waiting());
    const queue = session.queue;
    let i = 0;
    for (; i < queue.length; i++) {
      if (batch.length >= this.b.batchSize) break;
      const e = queue[i]!;
      if (blocked.has(e.key)) {
        keep.push(e);
        continue;
      }
      // An aggregate of the start read: its first streamed event says whether its rows stream again.
      if (
        this.handover.isUnknown(e.key) &&
        this.handover.resolve(e.key, e.message.sequence, e.via) === 'skip'
      ) {
        skipped.push(e);
        continue;
      }
      if (this.handover.skips(e.key, e.message.sequence, e.via)) {
        skipped.push(e);
        continue;
      }
      if (this.handover.isPolled(e.key) || !e.publishable || session.evicted.has(e.key)) {
        if (this.busy.has(e.key) || inBatch.has(e.key)) {
          blocked.add(e.key);
          keep.push(e);
          continue;
        }
        this.gate.forget(e.key);
        handovers.push(e);
        continue;
      }
      if (waiting.has(e.key)) {
        blocked.add(e.key);
        keep.push(e);
        continue;
      }
      if (StreamGate.gated(e)) {
        const verdict = this.gate.check(e);
        if (verdict.kind === 'skip') {
          skipped.push(e);
          continue;
        }
        if (
          verdict.kind === 'unknown' ||
          (verdict.kind === 'handover' && (this.busy.has(e.key) || inBatch.has(e.key)))
        ) {
          blocked.add(e.key);
          keep.push(e);
          continue;
        }
        if (verdict.kind === 'handover') {
          this.b.logger.warn(
            {
              relayId: this.id,
              aggregate: e.key.replace('\u001f', '/'),
              sequence: e.message.sequence,
              delivered: verdict.delivered,
            },
            verdict.repeat
              ? 'caller version at or below the last published: handed to the polling path (a repeat goes dead)'
              : 'caller version gap: handed to the polling path (bridged after the gap grace)',
          );
          this.gate.forget(e.key);
          progress.set(e.key, verdict.delivered);
          handovers.push(e);
          continue;
        }
      } else this.gate.passed(e);
      batch.push(e);
      inBatch.add(e.key);
    }
    session.queue = i < queue.length ? keep.concat(queue.slice(i)) : keep;
    if (skipped.length > 0) this.settle(session, skipped);
    return { batch, handovers, progress };
  }

  /** The gate's progress lookup for the queue's gated aggregates it has not seen (one statement). */
  private async lookUp(session: StreamSession): Promise<void> {
    const keys = this.gate.unknown(
      session.queue,
      (e) => this.handover.isPolled(e.key) || !e.publishable || session.evicted.has(e.key),
    );
    if (keys.length > 0) await this.gate.lookUp(this.b.pool, keys);
  }

  /**
   * Hands streamed events over to the polling path: WAL-mode events become pending rows, table
   * events are in the table already; an aggregate that leaves the stream here gets its progress
   * (delivered up to the event before: the stream delivered all of it until now). Settled once
   * the handover committed.
   */
  private async handOver(
    session: StreamSession,
    events: readonly StreamEvent[],
    delivered: ReadonlyMap<string, number> = new Map(),
  ): Promise<void> {
    const rows: HandoverRow[] = [];
    const progress: ProgressRow[] = [];
    const entered = new Set<string>();
    for (const e of events) {
      if (!this.handover.isPolled(e.key) && !entered.has(e.key)) {
        entered.add(e.key);
        progress.push({
          key: e.key,
          delivered: delivered.get(e.key) ?? e.message.sequence - 1,
          blockMs: null,
        });
      }
      this.handover.enter(e.key, e.message.sequence);
      session.evicted.delete(e.key);
      if (e.undecodable !== undefined) {
        this.b.logger.error(
          { relayId: this.id, id: e.message.id, error: e.undecodable },
          'WAL-mode message not readable: kept as a dead event (tx-outbox dead list)',
        );
        const error = redactText(`permanent: ${e.undecodable}`).slice(0, MAX_ERROR_CHARS);
        const failure: Failure = { id: e.message.id, status: 'dead', delayMs: 0, error, reason: 'permanent' };
        rows.push({ event: e, failure });
        this.counters.recorded(0, [failure]);
      } else if (e.via === 'wal') rows.push(this.gate.fresh(e) ? { event: e, fresh: true } : { event: e });
    }
    const { partitions, epochs } = this.leases.snapshot();
    await this.writeHandover({ relayId: this.id, partitions, epochs }, rows, progress, events);
    for (const e of events) this.handover.claimableUpTo(e.key, e.message.sequence);
    this.cdc.handovers += events.length;
    this.settle(session, events);
    this.poll.wake();
  }

  private async writeHandover(
    fence: Fence,
    rows: readonly HandoverRow[],
    progress: readonly ProgressRow[],
    events: readonly StreamEvent[],
  ): Promise<void> {
    const tableXids = events.filter((e) => e.via === 'table').map((e) => e.xid);
    if (rows.length === 0 && progress.length === 0 && tableXids.length === 0) return;
    for (const e of events) this.handingOver.set(e.key, (this.handingOver.get(e.key) ?? 0) + 1);
    try {
      try {
        const client = await this.handoverSession.get();
        // The table-mode rows handed over must be visible before their aggregate may be released
        // (P's release check would not see them, and let the stream publish past them).
        await this.handover.visible(client, tableXids);
        if (rows.length > 0 || progress.length > 0)
          this.own.add(await this.handover.write(client, fence, rows, progress));
      } catch (error) {
        await this.handoverSession.release(error);
        throw error;
      }
    } finally {
      for (const e of events) {
        const n = (this.handingOver.get(e.key) ?? 1) - 1;
        if (n > 0) this.handingOver.set(e.key, n);
        else this.handingOver.delete(e.key);
      }
    }
  }

  /**
   * What the verdict means for the queue, at once (before the next batch is taken): failed
   * aggregates are P's from now on; events refused as unavailable, or left behind a failure or
   * refusal, go back to the queue's front in order. Returns the outage wait when nothing got through.
   */
  private judged(
    session: StreamSession,
    batch: readonly StreamEvent[],
    verdict: Verdict,
  ): number | undefined {
    const done = new Set(verdict.delivered);
    for (const f of verdict.failures) done.add(f.id);
    const failed = new Map(verdict.failures.map((f) => [f.id, f]));
    const back: StreamEvent[] = [];
    for (const e of batch) {
      if (failed.has(e.message.id)) this.handover.enter(e.key, e.message.sequence);
      else if (!done.has(e.message.id)) back.push(e);
    }
    if (back.length > 0) {
      this.track(back, -1);
      for (const e of back) this.gate.unpass(e);
      session.queue = back.concat(session.queue);
    }
    const deliveredKeys = batch.filter((e) => done.has(e.message.id)).map((e) => e.key);
    for (const key of this.refusals.judged(deliveredKeys, verdict.refused)) {
      // Refused while the stream delivered others: the polling path retries it on its own backoff.
      session.evicted.add(key);
      this.refused.settled(key);
      this.b.logger.warn(
        { relayId: this.id, aggregate: key.replace('\u001f', '/') },
        'aggregate refused as unavailable while others were delivered: handed to the polling path',
      );
    }
    if (verdict.unavailable === 0) {
      session.refusedBatches = 0;
      if (this.refused.outstanding() === 0) this.outage.recovered();
      return undefined;
    }
    session.refusedBatches += 1;
    this.outage.refused(verdict.unavailable, this.counters.lastError);
    const delay = outageDelay(session.refusedBatches, this.b.random);
    this.refused.refused(verdict.refused, Date.now() + delay);
    return verdict.delivered.length === 0 && verdict.failures.length === 0 ? delay : undefined;
  }

  /**
   * The outcome of a published batch: table-mode events through the polling relay's outcome
   * statement (delivered rows deleted, failed ones rescheduled or dead, progress; fenced);
   * WAL-mode failures into the table (handover); WAL-mode deliveries write nothing. Then the
   * batch's delivered and failed events are settled.
   */
  private async record(
    session: StreamSession,
    batch: readonly StreamEvent[],
    verdict: Verdict,
    fence: Fence,
  ): Promise<void> {
    const byId = new Map(batch.map((e) => [e.message.id, e]));
    const tableDelivered: string[] = [];
    const tableFailures: Failure[] = [];
    const rows: HandoverRow[] = [];
    const progress: ProgressRow[] = [];
    const settled: StreamEvent[] = [];
    let walDelivered = 0;
    const walFailures: Failure[] = [];
    const walCaller: StreamEvent[] = [];
    for (const id of verdict.delivered) {
      const e = byId.get(id);
      if (!e) continue;
      settled.push(e);
      if (e.via === 'table') tableDelivered.push(id);
      else {
        walDelivered += 1;
        if (e.wal?.callerVersion) walCaller.push(e);
      }
    }
    for (const f of verdict.failures) {
      const e = byId.get(f.id);
      if (!e) continue;
      settled.push(e);
      if (e.via === 'table') {
        tableFailures.push(f);
        progress.push({ key: e.key, delivered: e.message.sequence - 1, blockMs: null });
      } else {
        walFailures.push(f);
        rows.push({ event: e, failure: f });
        progress.push({
          key: e.key,
          delivered: e.message.sequence - 1,
          blockMs: f.status === 'dead' ? -1 : f.delayMs,
        });
      }
    }
    try {
      if (tableDelivered.length > 0 || tableFailures.length > 0) {
        const xids = settled.filter((e) => e.via === 'table').map((e) => e.xid);
        await this.handover.visible(await this.recordSession.get(), xids);
        await this.recorder.record({ ...verdict, delivered: tableDelivered, failures: tableFailures });
      }
      if (walCaller.length > 0) await this.gate.recordWal(await this.recordSession.get(), fence, walCaller);
      const failedIds = new Set(verdict.failures.map((f) => f.id));
      const failed = settled.filter((e) => failedIds.has(e.message.id));
      await this.writeHandover(fence, rows, progress, failed);
      for (const e of failed) this.handover.claimableUpTo(e.key, e.message.sequence);
      if (walDelivered > 0 || walFailures.length > 0) this.counters.recorded(walDelivered, walFailures);
      if (verdict.failures.length > 0) this.poll.wake();
    } finally {
      this.track(settled, -1);
    }
    this.settle(session, settled);
    this.bell.wake();
  }
}

/** SQLSTATE 57P03: the server is shutting down (or starting up, or in recovery). */
const CANNOT_CONNECT_NOW = '57P03';

/** How often a relay whose slot was lost runs the start checks again. */
const SLOT_LOST_RETRY_MS = 60_000;

function reasonOf(error: unknown): ReconnectReason {
  if (error instanceof LeasesLost) return 'leases_lost';
  if (error instanceof FencedError) return 'fenced';
  const code = (error as { code?: unknown }).code;
  if (code === 'TXO_CDC_SILENT') return 'silent';
  if (code === 'TXO_CDC_SLOT_ACTIVE') return 'slot_active';
  return 'error';
}
