import type { Pool } from 'pg';
import type { Logger } from '../logger.js';
import { Doorbell } from '../relay/wakeup.js';
import { type AckTracker, nothingInFlight } from './acks.js';
import type { Handover } from './handover.js';
import type { Lsn } from './lsn.js';
import type { ReplicationStream } from './replication.js';
import type { StreamBatcher, StreamEvent } from './stream-batch.js';
import type { StreamCounters } from './stream-state.js';

export interface StreamSessionParts {
  readonly stream: ReplicationStream;
  readonly tracker: AckTracker;
  readonly batcher: StreamBatcher;
  /** The aggregates polled when the session started, and where the stream has caught up with them. */
  readonly polledAtStart: readonly string[];
  readonly catchUp: bigint;
  readonly pool: Pool;
  readonly logger: Logger;
  readonly relayId: string;
  readonly maxInFlight: number;
  readonly batchSize: number;
  readonly counters: StreamCounters;
  readonly handover: Handover;
  /** {@link CAUGHT_UP_SQL} with the schema. */
  readonly caughtUpSql: string;
  readonly leases: { snapshot(): { partitions: number[]; epochs: string[] } };
  /** Rings the publishing loop: new events, a failure. */
  readonly bell: Doorbell;
  readonly halted: () => boolean;
  /** The stream delivered changes. */
  readonly onChanges: () => void;
  /** The stream caught up with the start set: the hand-over source may claim. */
  readonly onCaughtUp: () => void;
}

/**
 * One stream's state, from its start to its failure (or the relay's stop): the reader that
 * streams changes into the queue (paused at maxInFlight unsettled events), and the slot's
 * confirmation past what is settled.
 */
export class StreamSession {
  readonly stream: ReplicationStream;
  readonly tracker: AckTracker;
  /** Events read and not taken yet, in stream order. */
  queue: StreamEvent[] = [];
  /** Events read and not settled yet. */
  unsettled = 0;
  /** Changes the reader took from the stream and read into units (see {@link nothingInFlight}). */
  read = 0;
  /** The reader's or a recording's failure: ends the session. */
  failure: unknown;
  /** The outcome being recorded (one at a time; the next batch publishes meanwhile). */
  recording: Promise<void> | undefined;
  /**
   * The stream settled everything committed before the polled set was read: P may claim. Before,
   * a WAL-mode event of a polled aggregate may still be on its way into the table (a reconnect
   * streams again what was not confirmed), and P would publish the aggregate's later rows first.
   */
  caughtUp: boolean;
  /** Aggregates refused as unavailable past the {@link RefusalBound}: handed over at the next take. */
  readonly evicted = new Set<string>();
  /** Rings when the reader may read again (below maxInFlight) or must stop. */
  readonly readerBell = new Doorbell();
  #catchingUp = false;
  #reader: Promise<void> | undefined;

  constructor(private readonly p: StreamSessionParts) {
    this.stream = p.stream;
    this.tracker = p.tracker;
    this.caughtUp = p.catchUp === 0n;
  }

  /** Starts reading (the stream runs). */
  startReading(): void {
    this.#reader = this.#read();
  }

  /** Ends the session: the reader stops, the recording under way lands, the stream closes. */
  async end(): Promise<void> {
    this.failure ??= new Error('stream session ended');
    this.readerBell.wake();
    await this.recording?.catch(() => undefined);
    await this.stream.close();
    await this.#reader;
  }

  /** The reader: stream changes into the queue, paused at maxInFlight unsettled events. */
  async #read(): Promise<void> {
    const p = this.p;
    try {
      while (!p.halted() && this.failure === undefined) {
        if (this.unsettled >= p.maxInFlight) {
          await this.readerBell.sleep(100);
          continue;
        }
        const changes = await this.stream.next(p.batchSize);
        if (this.failure !== undefined) return;
        if (changes.length > 0) p.onChanges();
        p.counters.server = this.stream.serverLsn;
        const events = p.batcher.add(changes);
        this.read += changes.length;
        this.unsettled += events.length;
        for (const e of events) this.queue.push(e);
        this.confirm();
        if (events.length > 0) p.bell.wake();
      }
    } catch (error) {
      this.failure ??= error;
      p.bell.wake();
    }
  }

  /** These events are settled: the slot may move past them. */
  settle(events: readonly StreamEvent[]): void {
    for (const e of events) this.tracker.settle(e.unit);
    this.unsettled -= events.length;
    this.confirm();
    this.readerBell.wake();
  }

  confirm(): void {
    const lsn = this.tracker.confirmable();
    if (lsn !== undefined) this.advance(lsn);
  }

  /**
   * A keepalive's WAL end, confirmed when nothing is in flight (as pg_recvlogical does): the WAL
   * up to it holds nothing unsettled of the relay's, and PostgreSQL's shutdown waits until the
   * client confirms all it was sent, so a relay that confirmed only its own events' ends would
   * hold a restart of the database up for as long as it stays connected.
   */
  keepalive(walEnd: Lsn): void {
    if (this.failure !== undefined) return;
    this.confirm();
    const idle = nothingInFlight({
      buffered: this.stream.buffered,
      handedOut: this.stream.handedOut,
      read: this.read,
      pendingUnits: this.tracker.pendingUnits,
      unsettled: this.unsettled,
    });
    if (idle) this.advance(walEnd);
    this.p.counters.server = this.stream.serverLsn;
  }

  /** The slot may be confirmed up to `lsn`: the stream's next status update says so. */
  advance(lsn: Lsn): void {
    const p = this.p;
    this.stream.confirm(lsn);
    if (lsn > p.counters.confirmed) p.counters.confirmed = lsn;
    if (!this.caughtUp && !this.#catchingUp && lsn >= p.catchUp) {
      this.#catchingUp = true;
      // At once, before the next batch is taken: what is still unknown never streams again.
      const fromUnknown = p.handover.caughtUp();
      this.#raise(fromUnknown).then(
        () => {
          this.caughtUp = true;
          p.onCaughtUp();
        },
        (error: unknown) => {
          this.failure ??= error;
          p.bell.wake();
        },
      );
    }
  }

  /** See {@link CAUGHT_UP_SQL}. */
  async #raise(fromUnknown: readonly string[]): Promise<void> {
    const p = this.p;
    const { partitions, epochs } = p.leases.snapshot();
    const { rowCount } = await p.pool.query(p.caughtUpSql, [
      p.relayId,
      partitions,
      epochs,
      partitions.length,
      [...p.polledAtStart, ...fromUnknown],
    ]);
    p.logger.debug(
      { relayId: p.relayId, raised: rowCount, fromUnknown: fromUnknown.length },
      'stream caught up with the start set',
    );
  }
}
