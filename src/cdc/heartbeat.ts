/**
 * The CDC heartbeat: a non-transactional logical message every `intervalMs`. On a quiet database
 * (or one whose writes are all in other databases or tables) the slot would otherwise get no
 * change to confirm, so its confirmed LSN would stand still while the WAL it pins grows; the
 * heartbeat gives the relay something to stream and confirm. It also feeds the stream's silence
 * watchdog. Failures are logged (rate-limited), never thrown: a missed beat costs nothing.
 */

import type { Pool } from 'pg';
import { errorMessage } from '../errors.js';
import { type Logger, silentLogger } from '../logger.js';

/** $1: the heartbeat prefix (src/producer/wal-message.ts); the returned LSN is only for tests. */
export const HEARTBEAT_MESSAGE_SQL = `SELECT pg_logical_emit_message(false, $1::text, ''::text)::text AS lsn`;

export interface HeartbeatOptions {
  readonly pool: Pool;
  /** The heartbeat message prefix, `tx-outbox:<schema>:heartbeat`. */
  readonly prefix: string;
  /** Between beats. */
  readonly intervalMs: number;
  readonly logger?: Logger;
  /** Failures are logged at most this often (the others are counted in the next line). Default 60000. */
  readonly warnEveryMs?: number;
}

export class Heartbeat {
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private inFlight: Promise<unknown> = Promise.resolve();
  private lastWarnAt: number | undefined;
  private suppressed = 0;
  private failing = false;
  private readonly logger: Logger;
  /** Beats written, and failed (for stats and tests). */
  beats = 0;
  failures = 0;

  constructor(private readonly options: HeartbeatOptions) {
    if (!Number.isFinite(options.intervalMs) || options.intervalMs <= 0) {
      throw new RangeError(`heartbeat interval must be positive, got ${options.intervalMs}`);
    }
    this.logger = options.logger ?? silentLogger;
  }

  /** Beats at once, then every intervalMs until stop(). Idempotent. */
  start(): void {
    if (this.running) return;
    this.running = true;
    this.tick();
  }

  /** No new beat; waits for the one in flight. */
  async stop(): Promise<void> {
    this.running = false;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    await this.inFlight;
  }

  /** One beat; resolves to whether it was written. Never rejects. */
  async beat(): Promise<boolean> {
    try {
      await this.options.pool.query(HEARTBEAT_MESSAGE_SQL, [this.options.prefix]);
      this.beats += 1;
      if (this.failing) {
        this.failing = false;
        this.logger.info({ prefix: this.options.prefix }, 'CDC heartbeat written again');
      }
      return true;
    } catch (error) {
      this.failures += 1;
      this.failing = true;
      this.warn(error);
      return false;
    }
  }

  private tick(): void {
    const beat = this.beat();
    this.inFlight = beat;
    // The next beat is timed from this one's end: a slow database never gets them stacked up.
    void beat.then(() => {
      if (!this.running) return;
      this.timer = setTimeout(() => this.tick(), this.options.intervalMs);
      this.timer.unref();
    });
  }

  private warn(error: unknown): void {
    const now = performance.now();
    const every = this.options.warnEveryMs ?? 60_000;
    if (this.lastWarnAt !== undefined && now - this.lastWarnAt < every) {
      this.suppressed += 1;
      return;
    }
    this.logger.warn(
      { prefix: this.options.prefix, error: errorMessage(error), suppressed: this.suppressed },
      'CDC heartbeat failed (retried every interval; the slot does not advance on a quiet database meanwhile)',
    );
    this.lastWarnAt = now;
    this.suppressed = 0;
  }
}
