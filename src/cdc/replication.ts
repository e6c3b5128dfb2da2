/**
 * One logical replication stream of a pgoutput slot, over pg's own connection: a `pg.Client` with
 * `replication: 'database'` runs START_REPLICATION as a simple query, the server switches to CopyBoth,
 * and the frames arrive as the connection's 'copyData' events; standby status updates go back with the
 * connection's copy-data send. No other library: the decoder (pgoutput.ts) is ours and lean.
 *
 * A stream is used once. Any failure (socket error, the server ending the stream, the walsender
 * terminated, silence) rejects `next()` and the stream is dead; the relay opens a new one from the
 * slot's confirmed LSN (it owns reconnect and backoff). Nothing here emits an 'error' event or leaves a
 * promise nobody awaits: a killed walsender rejects one call and never crashes the process.
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { OutboxError, OutboxValidationError } from '../errors.js';
import { type Logger, silentLogger } from '../logger.js';
import { formatLsn, type Lsn } from './lsn.js';
import { PgoutputDecoder, type PgoutputMessage } from './pgoutput.js';
import { asError, drained, raceTimeout, replicationConfig, startError } from './replication-connection.js';
import { startReplicationSql } from './replication-sql.js';

export interface ReplicationStreamOptions {
  /** The pool's options; the stream adds `replication: 'database'`, TimeZone=UTC and DateStyle=ISO. */
  readonly connection: pg.ClientConfig;
  readonly slot: string;
  readonly publication: string;
  /** Default 0n: the slot's confirmed_flush_lsn. */
  readonly startLsn?: Lsn;
  /** Standby status update cadence, default 1000 (also at once when the server asks for a reply). */
  readonly statusIntervalMs?: number;
  /** Nothing at all received for this long (while reading) → fail with TXO_CDC_SILENT. Default 30000. */
  readonly silenceTimeoutMs?: number;
  /** Decoded changes buffered before the socket is paused (resumed below half). Default 10000. */
  readonly highWaterMark?: number;
  /**
   * Called with the WAL position of every keepalive (the server's sentPtr: everything it decoded,
   * sent or not) before the reply it may ask for goes out. A consumer with nothing in flight
   * confirms it: PostgreSQL's shutdown waits until the client confirms all it was sent.
   */
  readonly onKeepalive?: (walEnd: Lsn) => void;
  readonly logger?: Logger;
}

/** One decoded change; `lsn` is its XLogData frame's WAL start. */
export interface StreamChange {
  readonly lsn: Lsn;
  readonly message: PgoutputMessage;
}

/** pg's Connection, as far as the stream uses it (its public methods, untyped in @types/pg). */
interface ReplicationConnection {
  readonly stream: import('node:net').Socket;
  on(event: 'copyData', listener: (message: { chunk: Buffer }) => void): void;
  once(event: 'replicationStart', listener: () => void): void;
  sendCopyFromChunk(chunk: Buffer): void;
  /** Sends CopyDone. */
  endCopyFrom(): void;
}

const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;
/** ms from the Unix epoch to PostgreSQL's (2000-01-01 UTC). */
const PG_EPOCH_MS = 946_684_800_000;
const XLOG_DATA = 0x77; // 'w'
const KEEPALIVE = 0x6b; // 'k'
const END_GRACE_MS = 1000;

interface Waiter {
  readonly max: number;
  readonly resolve: (changes: StreamChange[]) => void;
  readonly reject: (error: Error) => void;
}

export class ReplicationStream {
  readonly #options: ReplicationStreamOptions;
  readonly #logger: Logger;
  readonly #statusIntervalMs: number;
  readonly #silenceTimeoutMs: number;
  readonly #highWaterMark: number;
  readonly #decoder = new PgoutputDecoder({ copyContent: true });

  #client: pg.Client | undefined;
  #connection: ReplicationConnection | undefined;
  #startPromise: Promise<void> | undefined;
  #startWaiter: { resolve: () => void; reject: (error: Error) => void } | undefined;
  #closePromise: Promise<void> | undefined;
  #streaming = false;
  #error: Error | undefined;

  #buffer: StreamChange[] = [];
  #head = 0;
  #waiter: Waiter | undefined;
  #paused = false;

  #confirmed: Lsn;
  #serverLsn: Lsn = 0n;
  #handedOut = 0;
  #lastReceivedAt = performance.now();
  /** Start of the current silence; reset while the socket is paused by us (a slow reader is not silence). */
  #quietSince = performance.now();
  #statusTimer: NodeJS.Timeout | undefined;
  #watchdog: NodeJS.Timeout | undefined;
  /** Bounds connect + START_REPLICATION: a black-holed network must not hang a reconnect. */
  #startTimer: NodeJS.Timeout | undefined;

  constructor(options: ReplicationStreamOptions) {
    for (const field of ['slot', 'publication'] as const) {
      if (!IDENTIFIER.test(options[field])) {
        throw new OutboxValidationError(
          field,
          `'${options[field]}' is not a valid name`,
          'Use [a-z_][a-z0-9_]*',
        );
      }
    }
    this.#options = options;
    this.#logger = options.logger ?? silentLogger;
    this.#statusIntervalMs = positive('statusIntervalMs', options.statusIntervalMs ?? 1000);
    this.#silenceTimeoutMs = positive('silenceTimeoutMs', options.silenceTimeoutMs ?? 30_000);
    this.#highWaterMark = positive('highWaterMark', options.highWaterMark ?? 10_000);
    this.#confirmed = options.startLsn ?? 0n;
  }

  /** The LSN the next status update reports as written, flushed and applied. */
  get confirmed(): Lsn {
    return this.#confirmed;
  }

  /** The latest WAL position the server said it sent up to (XLogData or keepalive). */
  get serverLsn(): Lsn {
    return this.#serverLsn;
  }

  /** Changes `next()` has handed out in all. */
  get handedOut(): number {
    return this.#handedOut;
  }

  /** performance.now() of the last frame from the server. */
  get lastReceivedAt(): number {
    return this.#lastReceivedAt;
  }

  /** Decoded changes waiting for `next()`. */
  get buffered(): number {
    return this.#buffer.length - this.#head;
  }

  /** Whether the socket is paused for flow control. */
  get paused(): boolean {
    return this.#paused;
  }

  /**
   * Connects and starts streaming. Rejects with OutboxError TXO_CDC_SLOT_ACTIVE (another connection
   * streams the slot; the message names its pid), TXO_CDC_NO_SLOT, or the pg error.
   */
  start(): Promise<void> {
    this.#startPromise ??= this.#start();
    return this.#startPromise;
  }

  async #start(): Promise<void> {
    if (this.#error !== undefined) throw this.#error;
    const { slot, publication } = this.#options;
    const client = new pg.Client(replicationConfig(this.#options.connection));
    this.#client = client;
    // Every failure lands in #fail; none is an unhandled 'error' event.
    client.on('error', (error) => this.#fail(error));
    client.on('end', () => this.#fail(new OutboxError('the replication connection ended', streamEnded)));
    this.#startTimer = setTimeout(() => {
      this.#fail(
        new OutboxError(
          `cdc: no replication stream within ${this.#silenceTimeoutMs} ms (silenceTimeoutMs) of connecting: ` +
            'the server or the network does not answer',
          { code: 'TXO_CDC_SILENT', retryable: true },
        ),
      );
    }, this.#silenceTimeoutMs);
    this.#startTimer.unref();
    await new Promise<void>((resolve, reject) => {
      this.#startWaiter = { resolve, reject };
      client.connect().then(
        () => {
          if (this.#error !== undefined) return;
          const connection = client.connection as unknown as ReplicationConnection;
          this.#connection = connection;
          connection.on('copyData', (message) => this.#onCopyData(message.chunk));
          connection.once('replicationStart', () => {
            clearTimeout(this.#startTimer);
            this.#streaming = true;
            this.#startWaiter = undefined;
            resolve();
          });
          // The query settles only when the stream ends: normally (CopyDone) or with the server's error.
          client.query(startReplicationSql(slot, publication, this.#options.startLsn ?? 0n)).then(
            () => this.#fail(new OutboxError('the server ended the replication stream', streamEnded)),
            (error: unknown) => this.#fail(error),
          );
        },
        (error: unknown) => this.#fail(error),
      );
    });
    const now = performance.now();
    this.#lastReceivedAt = now;
    this.#quietSince = now;
    this.#statusTimer = setInterval(() => this.#sendStatus(), this.#statusIntervalMs);
    this.#statusTimer.unref();
    const tick = Math.min(1000, Math.max(10, Math.floor(this.#silenceTimeoutMs / 10)));
    this.#watchdog = setInterval(() => this.#checkSilence(), tick);
    this.#watchdog.unref();
    this.#logger.info(
      { slot, publication, startLsn: formatLsn(this.#options.startLsn ?? 0n) },
      'cdc: replication stream started',
    );
  }

  /**
   * 1..max buffered changes, as soon as there is at least one. Rejects once the stream failed or was
   * closed (and every call after that). One call at a time.
   */
  next(max: number): Promise<StreamChange[]> {
    if (this.#error !== undefined) return Promise.reject(this.#error);
    if (!Number.isInteger(max) || max < 1) {
      return Promise.reject(
        new OutboxValidationError('max', `${max} is not a count ≥ 1`, 'Pass a batch size'),
      );
    }
    if (this.#waiter !== undefined) {
      return Promise.reject(
        new OutboxError('ReplicationStream.next() is already pending', { code: 'TXO_CDC_BUSY' }),
      );
    }
    if (this.buffered > 0) return Promise.resolve(this.#take(max));
    return new Promise((resolve, reject) => {
      this.#waiter = { max, resolve, reject };
    });
  }

  /** Monotonic: an LSN below the last confirmed one is ignored. Sent with the next status update. */
  confirm(lsn: Lsn): void {
    if (lsn > this.#confirmed) this.#confirmed = lsn;
  }

  /** Sends a last status update and ends the connection. Idempotent; never throws. */
  close(): Promise<void> {
    this.#closePromise ??= this.#close().catch((error: unknown) => {
      this.#logger.warn({ err: error }, 'cdc: closing the replication stream failed');
      this.#connection?.stream.destroy();
    });
    return this.#closePromise;
  }

  async #close(): Promise<void> {
    const client = this.#client;
    const connection = this.#connection;
    if (this.#error === undefined && this.#streaming && client !== undefined && connection !== undefined) {
      // A last status update, then CopyDone: the walsender ends the stream and releases the slot.
      this.#sendStatus();
      const ended = new Promise<void>((resolve) => client.once('end', resolve));
      this.#error = new OutboxError('the replication stream was closed', streamClosed);
      this.#rejectWaiters(this.#error);
      this.#stopTimers();
      this.#buffer = [];
      this.#head = 0;
      if (this.#paused) connection.stream.resume();
      connection.endCopyFrom();
      // The server answers CopyDone, CommandComplete, ReadyForQuery; then a graceful Terminate.
      const done = await raceTimeout(drained(client), END_GRACE_MS);
      if (!done) connection.stream.destroy();
      else client.end().catch(() => {});
      if (!(await raceTimeout(ended, END_GRACE_MS))) connection.stream.destroy();
      return;
    }
    this.#fail(new OutboxError('the replication stream was closed', streamClosed));
  }

  #onCopyData(chunk: Buffer): void {
    if (this.#error !== undefined) return;
    const now = performance.now();
    this.#lastReceivedAt = now;
    this.#quietSince = now;
    const kind = chunk[0];
    if (kind === XLOG_DATA) {
      const walEnd = chunk.readBigUInt64BE(9);
      if (walEnd > this.#serverLsn) this.#serverLsn = walEnd;
      let message: PgoutputMessage;
      try {
        message = this.#decoder.decode(chunk, 25);
      } catch (error) {
        this.#fail(error);
        return;
      }
      this.#buffer.push({ lsn: chunk.readBigUInt64BE(1), message });
      const waiter = this.#waiter;
      if (waiter !== undefined) {
        this.#waiter = undefined;
        waiter.resolve(this.#take(waiter.max));
      } else if (!this.#paused && this.buffered >= this.#highWaterMark) {
        this.#paused = true;
        this.#connection?.stream.pause();
      }
    } else if (kind === KEEPALIVE) {
      const walEnd = chunk.readBigUInt64BE(1);
      if (walEnd > this.#serverLsn) this.#serverLsn = walEnd;
      try {
        this.#options.onKeepalive?.(walEnd);
      } catch (error) {
        this.#fail(error);
        return;
      }
      // A reply asked for (a shutdown asks until it is answered with all it sent): at once.
      if (chunk[17] === 1) this.#sendStatus();
    }
  }

  #take(max: number): StreamChange[] {
    const start = this.#head;
    const end = Math.min(this.#buffer.length, start + max);
    const changes = this.#buffer.slice(start, end);
    this.#handedOut += changes.length;
    if (end === this.#buffer.length) {
      this.#buffer = [];
      this.#head = 0;
    } else {
      this.#head = end;
      if (end > 4096 && end * 2 > this.#buffer.length) {
        this.#buffer = this.#buffer.slice(end);
        this.#head = 0;
      }
    }
    if (this.#paused && this.buffered < this.#highWaterMark / 2) {
      this.#paused = false;
      this.#quietSince = performance.now();
      this.#connection?.stream.resume();
    }
    return changes;
  }

  /** Standby status update: written = flushed = applied = the confirmed LSN; no reply requested. */
  #sendStatus(): void {
    const connection = this.#connection;
    if (connection === undefined || this.#error !== undefined || !this.#streaming) return;
    const frame = Buffer.allocUnsafe(34);
    frame[0] = 0x72; // 'r'
    frame.writeBigUInt64BE(this.#confirmed, 1);
    frame.writeBigUInt64BE(this.#confirmed, 9);
    frame.writeBigUInt64BE(this.#confirmed, 17);
    frame.writeBigInt64BE(BigInt(Date.now() - PG_EPOCH_MS) * 1000n, 25);
    frame[33] = 0;
    connection.sendCopyFromChunk(frame);
  }

  #checkSilence(): void {
    if (this.#paused || this.#error !== undefined) return;
    const quiet = performance.now() - this.#quietSince;
    if (quiet < this.#silenceTimeoutMs) return;
    this.#fail(
      new OutboxError(
        `cdc: nothing received from PostgreSQL on slot ${this.#options.slot} for ${Math.round(quiet)} ms ` +
          `(silenceTimeoutMs ${this.#silenceTimeoutMs}); the connection is presumed dead`,
        { code: 'TXO_CDC_SILENT', retryable: true },
      ),
    );
  }

  /** The first failure wins: rejects the pending start/next, stops the timers, drops the connection. */
  #fail(cause: unknown): void {
    if (this.#error !== undefined) return;
    const error = this.#streaming ? asError(cause) : startError(cause, this.#options.slot);
    this.#error = error;
    this.#stopTimers();
    this.#buffer = [];
    this.#head = 0;
    this.#rejectWaiters(error);
    if (!isClosed(error)) {
      // A start failure is the caller's to report (the relay logs a repeated one once, with reminders).
      this.#logger[this.#streaming ? 'warn' : 'debug'](
        { slot: this.#options.slot, code: (error as { code?: unknown }).code, err: error.message },
        'cdc: replication stream failed',
      );
    }
    const client = this.#client;
    if (client !== undefined) {
      const socket = (client.connection as unknown as ReplicationConnection).stream;
      client.end().catch(() => {});
      // end() destroys a socket with a query in flight; one that is held open half-closed goes too.
      setTimeout(() => socket.destroy(), END_GRACE_MS).unref();
    }
  }

  #rejectWaiters(error: Error): void {
    const start = this.#startWaiter;
    this.#startWaiter = undefined;
    start?.reject(error);
    const waiter = this.#waiter;
    this.#waiter = undefined;
    waiter?.reject(error);
  }

  #stopTimers(): void {
    clearTimeout(this.#startTimer);
    clearInterval(this.#statusTimer);
    clearInterval(this.#watchdog);
    this.#statusTimer = undefined;
    this.#watchdog = undefined;
  }
}

const streamEnded = { code: 'TXO_CDC_STREAM_ENDED', retryable: true } as const;
const streamClosed = { code: 'TXO_CDC_CLOSED', retryable: false } as const;

function isClosed(error: Error): boolean {
  return (error as { code?: unknown }).code === streamClosed.code;
}

function positive(field: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0) {
    throw new OutboxValidationError(field, `${value} is not a positive number`, 'Pass a number > 0');
  }
  return value;
}
