import { OutboxError } from '../errors.js';
import { eventsPrefix, heartbeatPrefix } from '../producer/wal-message.js';
import type { RelayLoop } from '../relay/loop.js';
import { outcomeStatement } from '../relay/outcome-sql.js';
import { Recorder } from '../relay/record.js';
import type { ReleaseStack } from '../relay/release-stack.js';
import type { RuntimeContext, RuntimeSource } from '../relay/runtime.js';
import { RelaySession, relaySessionSettings, relayStatement } from '../relay/session.js';
import type { SourceBatch } from '../relay/source.js';
import type { Verdict } from '../relay/verdicts.js';
import { withSchema } from '../schema/identifiers.js';
import { AckTracker } from './acks.js';
import { Handover } from './handover.js';
import { HandoverSource } from './handover-source.js';
import { CAUGHT_UP_SQL, HANDOVER_SQL } from './handover-sql.js';
import { Heartbeat } from './heartbeat.js';
import { formatLsn, parseLsn } from './lsn.js';
import type { ResolvedCdcRelayOptions } from './options.js';
import { ReplicationStream } from './replication.js';
import { type CdcNames, checkCdc, ensureCdcSlot, resolveCdcNames, takeOverSlot } from './setup.js';
import { SlotState } from './slot-state.js';
import { RepeatedErrorLog, StreamTrouble } from './standby.js';
import { CdcMetrics, type CdcStats } from './stats.js';
import { handoverPrefix, OwnTransactions, StreamBatcher, type StreamEvent } from './stream-batch.js';
import { RefusalBound, StreamGate } from './stream-gate.js';
import { WalHistory } from './stream-history.js';
import { LeasesLost, StreamRecovery } from './stream-recovery.js';
import { StreamSession } from './stream-session.js';
import { StreamSettler } from './stream-settle.js';
import { type StreamCounters, StreamInFlight } from './stream-state.js';
import { lookUp, type TakeParts, take } from './stream-take.js';
import { loadWalKey, WalReader, WalRefusals } from './wal-auth.js';

/** A streamed batch: the events behind the messages. */
export interface StreamBatch extends SourceBatch {
  readonly events: StreamEvent[];
}

/** Refused batches after which one aggregate refused while others are delivered leaves the stream. */
const MAX_REFUSED_BATCHES = 3;

/** SQLSTATE 57P03: the server is shutting down (or starting up, or in recovery). */
const CANNOT_CONNECT_NOW = '57P03';

/**
 * The CDC stream source: holds every partition lease (the fence), streams the slot's inserts
 * into the events table and WAL-mode messages, hands their batches to the loop in per-aggregate
 * order, and confirms the slot past what is settled. Aggregates with a failure or a scheduled
 * event, and rows left in the table at start that will not stream again, are handed over to
 * the {@link HandoverSource}, which runs in a loop of its own while the stream runs.
 */
export class StreamSource implements RuntimeSource<StreamBatch> {
  readonly #c: RuntimeContext;
  readonly #o: ResolvedCdcRelayOptions;
  readonly #loop: RelayLoop;
  readonly #handover: Handover;
  readonly #handoverSource: HandoverSource;
  readonly #own = new OwnTransactions();
  /** Caller versions: the stream publishes an aggregate's next sequence only (see {@link StreamGate}). */
  readonly #gate: StreamGate;
  readonly #refusals: RefusalBound;
  readonly #inFlight = new StreamInFlight();
  readonly #recordSession: RelaySession;
  readonly #handoverSession: RelaySession;
  readonly #settler: StreamSettler;
  readonly #take: TakeParts;
  readonly #heartbeat: Heartbeat;
  readonly #metrics: CdcMetrics;
  /** WAL-mode messages refused (not authenticated, format 1 where not read): counted, logged. */
  readonly #walRefusals: WalRefusals;
  readonly #counters: StreamCounters = { reconnects: 0, handovers: 0, confirmed: 0n, server: 0n };
  readonly #state: SlotState;
  readonly #trouble: StreamTrouble;
  readonly #loopLog: RepeatedErrorLog;
  readonly #recovery: StreamRecovery;
  readonly #caughtUpSql: string;
  /** The slot (given, or this database's default) and publication, resolved by prepare(). */
  #names: CdcNames | undefined;
  /** The session being opened or streaming; `#session` once it streams. */
  #opening: StreamSession | undefined;
  #session: StreamSession | undefined;
  /** How long `idle()` waits: standby, or nothing to take. */
  #idleMs = 0;

  constructor(c: RuntimeContext, o: ResolvedCdcRelayOptions) {
    const b = c.o;
    this.#c = c;
    this.#o = o;
    this.#loop = c.loop;
    this.#metrics = new CdcMetrics(b.metricsSink);
    this.#walRefusals = new WalRefusals(
      b.logger,
      { relayId: b.relayId, slot: o.slot },
      this.#metrics.refused,
    );
    const settings = relaySessionSettings(b.synchronousCommit);
    this.#recordSession = new RelaySession(b.pool, settings, b.logger, 'cdc-outcome');
    this.#handoverSession = new RelaySession(b.pool, relaySessionSettings('on'), b.logger, 'cdc-handover');
    this.#handover = new Handover(
      b.quotedSchema,
      withSchema(HANDOVER_SQL, b.quotedSchema),
      handoverPrefix(b.schema),
      b.logger,
    );
    this.#handoverSource = new HandoverSource({
      ...c,
      handover: this.#handover,
      streamInFlight: () => [...this.#inFlight.ids],
      handingOver: (key) => this.#inFlight.handingOver.has(key) || this.#inFlight.busy.has(key),
    });
    this.#gate = new StreamGate(b.quotedSchema);
    this.#refusals = new RefusalBound(MAX_REFUSED_BATCHES, b.outageReminderMs);
    this.#settler = new StreamSettler({
      logger: b.logger,
      relayId: b.relayId,
      counters: c.counters,
      stream: this.#counters,
      leases: c.leases,
      handover: this.#handover,
      gate: this.#gate,
      refusals: this.#refusals,
      refused: c.loop.refused,
      inFlight: this.#inFlight,
      own: this.#own,
      recorder: new Recorder(
        this.#recordSession,
        relayStatement(...outcomeStatement(b.history), b.schema, b.quotedSchema),
        b.relayId,
        b.logger,
        c.counters,
        b.history ? [b.publisher.name] : [],
      ),
      history: b.history && new WalHistory(b.schema, b.quotedSchema, b.history.payloads, b.publisher.name),
      recordSession: this.#recordSession,
      handoverSession: this.#handoverSession,
      wakeHandover: () => this.#handoverSource.wake(),
    });
    this.#take = {
      pool: b.pool,
      logger: b.logger,
      relayId: b.relayId,
      batchSize: b.batchSize,
      handover: this.#handover,
      gate: this.#gate,
      inFlight: this.#inFlight,
      refused: c.loop.refused,
    };
    this.#heartbeat = new Heartbeat({
      pool: b.pool,
      prefix: heartbeatPrefix(b.schema),
      intervalMs: o.heartbeatMs,
      logger: b.logger,
    });
    this.#state = new SlotState({
      ...b,
      metrics: this.#metrics,
      slot: o.slot,
      publication: o.publication,
      counters: this.#counters,
      resolvedSlot: () => this.#names?.slot,
      streaming: () => this.#session && { oldestPending: this.#session.tracker.oldestPendingCommitTime },
      polled: () => this.#handover.size,
      refusedMessages: () => this.#walRefusals.total,
    });
    this.#caughtUpSql = withSchema(CAUGHT_UP_SQL, b.quotedSchema);
    this.#trouble = new StreamTrouble(b.leaseMs);
    this.#loopLog = new RepeatedErrorLog(b.logger, { relayId: b.relayId });
    this.#recovery = new StreamRecovery({
      c,
      trouble: this.#trouble,
      log: this.#loopLog,
      metrics: this.#metrics,
      counters: this.#counters,
      sessions: [this.#recordSession, this.#handoverSession],
    });
  }

  stats(): CdcStats {
    return this.#state.stats();
  }

  /** Setup mistakes (wal_level, a lost slot, the WAL key's grant) are for the operator: said now. */
  async prepare(): Promise<void> {
    const b = this.#c.o;
    const names = await resolveCdcNames(b.pool, {
      schema: b.schema,
      slot: this.#o.slot,
      publication: this.#o.publication,
    });
    await checkCdc(b.pool, names, b.logger);
    await ensureCdcSlot(b.pool, names);
    this.#names = names;
    // The WAL key (migration 12, the relay role's grant): a setup mistake is said now.
    await loadWalKey(b.pool, b.schema, b.quotedSchema);
    if (this.#o.acceptWalFormat1) {
      b.logger.warn(
        { relayId: b.relayId, slot: names.slot },
        'acceptWalFormat1: WAL-mode messages of format 1 (no MAC) are published, so any database login can publish events; turn it off once every producer runs this tx-outbox (docs/cdc.md, Upgrading WAL mode)',
      );
    }
  }

  background(tasks: ReleaseStack): void {
    const timer = setInterval(() => void this.#state.write(), this.#c.o.backlogIntervalMs);
    timer.unref();
    tasks.interval(timer);
    void this.#state.sample();
    this.#heartbeat.start();
    tasks.push(() => this.#heartbeat.stop());
  }

  async renewed(error: unknown): Promise<void> {
    if ((error as { code?: unknown } | undefined)?.code === CANNOT_CONNECT_NOW) this.#serverGoingDown(error);
    if (this.#session && !(await this.#holdsAll().catch(() => false))) this.#loop.bell.wake();
  }

  describe(when: 'started' | 'stopped'): Record<string, unknown> {
    return when === 'started' ? { slot: this.#resolved().slot } : { ...this.stats() };
  }

  /** Standby until every partition is ours; then the stream opens; then the next batch of it. */
  async next(): Promise<StreamBatch | undefined> {
    const session = this.#session;
    if (session === undefined) {
      await this.#open();
      return undefined;
    }
    if (session.failure !== undefined) throw session.failure;
    if (!(await this.#holdsAll())) throw new LeasesLost();
    await lookUp(this.#take, session);
    const { batch, handovers, progress } = take(this.#take, session);
    if (handovers.length > 0) await this.#settler.handOver(session, handovers, progress);
    if (batch.length === 0) {
      this.#idleMs = handovers.length === 0 ? this.#c.o.pollIntervalMs : 0;
      return undefined;
    }
    this.#inFlight.track(batch, 1);
    const { partitions, epochs } = this.#c.leases.snapshot();
    return {
      messages: batch.map((e) => e.message),
      scanned: batch.length,
      partitions,
      epochs,
      events: batch,
    };
  }

  async idle(): Promise<void> {
    if (this.#idleMs > 0) await this.#loop.bell.sleep(this.#idleMs);
  }

  judged(batch: StreamBatch, verdict: Verdict): void {
    if (this.#session) this.#settler.judged(this.#session, batch.events, verdict);
  }

  async settle(batch: StreamBatch, verdict: Verdict): Promise<void> {
    const session = this.#session;
    if (session === undefined) throw new OutboxError('no stream session', { code: 'TXO_CDC_NO_SESSION' });
    await session.recording;
    if (session.failure !== undefined) throw session.failure;
    const fence = { relayId: this.#c.o.relayId, partitions: batch.partitions, epochs: batch.epochs };
    const recording = this.#settler
      .record(session, batch.events, verdict, fence)
      .then(() => this.#loop.bell.wake());
    recording.catch((error: unknown) => {
      session.failure ??= error;
      this.#loop.bell.wake();
    });
    session.recording = recording;
  }

  async drain(): Promise<void> {
    await this.#session?.recording?.catch(() => undefined);
  }

  async reset(error: unknown, failures: number, backoff: () => number): Promise<number> {
    await this.#end();
    if (failures === 0) return 0;
    return this.#recovery.recover(error, this.#resolved(), backoff);
  }

  stopped(): Promise<void> {
    return this.#end();
  }

  async close(timeoutMs: number): Promise<void> {
    await this.#handoverSource.close(timeoutMs);
    await Promise.all([this.#recordSession.release(), this.#handoverSession.release()]);
  }

  /** The names prepare() resolved: the loop, the stream and the state writes run only after it. */
  #resolved(): CdcNames {
    if (this.#names === undefined)
      throw new OutboxError('the CDC relay has not started', { code: 'TXO_RELAY_NOT_STARTED' });
    return this.#names;
  }

  async #holdsAll(): Promise<boolean> {
    const leases = this.#c.leases;
    return leases.size > 0 && leases.size === (await this.#c.partitions());
  }

  /**
   * PostgreSQL refuses connections (shutting down): the stream ends now. A shutdown waits for the
   * walsender, and the walsender until the relay confirms all it was sent; with events in flight
   * that the relay cannot settle (a broker that is down) the database would stay down as long as
   * the broker. What was not confirmed streams again once the server is back.
   */
  #serverGoingDown(cause: unknown): void {
    const session = this.#session;
    if (session === undefined || session.failure !== undefined) return;
    session.failure = new OutboxError(
      'PostgreSQL refuses connections (shutting down): the replication stream ends and starts again ' +
        'from the confirmed position once the server is back',
      { code: 'TXO_CDC_SERVER_DOWN', retryable: true, cause },
    );
    void session.stream.close();
    this.#loop.bell.wake();
    session.readerBell.wake();
  }

  /**
   * Standby until every partition is ours; then take the slot over, read the polled set, and
   * open the stream. After a failure the loop resets, and this starts over from the slot's
   * confirmed position (what was not confirmed comes again).
   */
  async #open(): Promise<void> {
    const b = this.#c.o;
    const names = this.#resolved();
    this.#idleMs = 0;
    await this.#recovery.slotChecked(names);
    await this.#c.leases.rebalance();
    if (!(await this.#holdsAll())) {
      this.#idleMs = Math.max(100, Math.floor(b.leaseMs / 3));
      return;
    }
    // The slot's holder, if any, is a relay that lost the leases: end its stream.
    if (!(await this.#c.leases.verifyAll())) return;
    await takeOverSlot(b.pool, names.slot, { logger: b.logger });
    const start = await this.#handover.rebuild(b.pool);
    const catchUp = start.polled.length > 0 || start.unknown > 0 ? await this.#catchUpMark() : 0n;
    await this.#startStream(names, start.polled, catchUp);
  }

  /**
   * Where the stream has caught up with the polled set just read: the WAL insert position, with a
   * heartbeat written after it (so a unit at or past it comes by even on an idle database).
   */
  async #catchUpMark(): Promise<bigint> {
    const b = this.#c.o;
    const { rows } = await b.pool.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn');
    await b.pool.query(`SELECT pg_logical_emit_message(false, $1::text, ''::text)`, [
      heartbeatPrefix(b.schema),
    ]);
    return parseLsn(rows[0]!.lsn);
  }

  /** One stream, opened: the session reads and the hand-over source runs until {@link #end}. */
  async #startStream(names: CdcNames, polled: readonly string[], catchUp: bigint): Promise<void> {
    const b = this.#c.o;
    const reader = await this.#walReader();
    const stream = new ReplicationStream({
      connection: this.#o.connection,
      slot: names.slot,
      publication: this.#o.publication,
      // From what this relay knows is settled, when that is past the slot's confirmed_flush (the
      // server honours the later of the two): fewer duplicates after a walsender was killed.
      ...(this.#counters.confirmed > 0n ? { startLsn: this.#counters.confirmed } : {}),
      statusIntervalMs: this.#o.statusIntervalMs,
      silenceTimeoutMs: this.#o.silenceTimeoutMs,
      // The stream's own read-ahead is bounded like the relay's: decoded changes waiting for the
      // reader cost memory as unsettled events do (a 10,000 default each was ~100 MB of RSS).
      highWaterMark: this.#o.maxInFlight,
      // Called only once the stream runs, after `session` below is set.
      onKeepalive: (walEnd) => session.keepalive(walEnd),
      logger: b.logger,
    });
    const tracker = new AckTracker();
    const session: StreamSession = new StreamSession({
      stream,
      tracker,
      batcher: new StreamBatcher(b.schema, eventsPrefix(b.schema), tracker, this.#own, reader),
      polledAtStart: polled,
      catchUp,
      pool: b.pool,
      logger: b.logger,
      relayId: b.relayId,
      maxInFlight: this.#o.maxInFlight,
      batchSize: b.batchSize,
      counters: this.#counters,
      handover: this.#handover,
      caughtUpSql: this.#caughtUpSql,
      leases: this.#c.leases,
      bell: this.#loop.bell,
      halted: () => this.#loop.halted,
      onChanges: () => {
        this.#trouble.delivered();
        this.#loopLog.cleared();
      },
      onCaughtUp: () => this.#handoverSource.wake(),
    });
    this.#refusals.clear();
    this.#opening = session;
    // Read before the stream starts: a WAL-mode event past it was never streamed before.
    const { rows } = await b.pool.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn');
    this.#gate.clear(parseLsn(rows[0]!.lsn));
    await stream.start();
    this.#counters.confirmed = stream.confirmed;
    this.#session = session;
    this.#metrics.streaming(true);
    this.#handoverSource.start(() => session.caughtUp);
    this.#loop.errors.healthy();
    b.logger.info({ relayId: b.relayId, slot: names.slot, from: formatLsn(stream.confirmed) }, 'streaming');
    session.startReading();
  }

  /** The WAL-mode messages' reader of one stream: the key read again for it (src/cdc/wal-auth.ts). */
  async #walReader(): Promise<WalReader> {
    const b = this.#c.o;
    const { key, utf8 } = await loadWalKey(b.pool, b.schema, b.quotedSchema);
    const partitions = await this.#c.partitions();
    return new WalReader(key, { partitions, utf8 }, this.#o.acceptWalFormat1, this.#walRefusals);
  }

  /** The session ends (a failure, or the relay stops): nothing of it stays in flight. */
  async #end(): Promise<void> {
    const session = this.#opening;
    if (session === undefined) return;
    try {
      if (this.#session === session) await session.end();
    } finally {
      this.#opening = undefined;
      this.#session = undefined;
      this.#metrics.streaming(false);
      await this.#handoverSource.stop();
      await session.stream.close();
      this.#inFlight.clear();
    }
  }
}
