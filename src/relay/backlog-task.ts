/**
 * The relay-side published backlog: every `intervalMs` the relay reads the backlog at a cost of
 * O(partitions) ({@link readBacklog}) and writes it into the one-row `backlog` table (migration
 * 008), where `enqueue({ maxPending })` reads it. Any relay may write; the statement skips a
 * row fresher than half an interval, so N relays write about twice an interval in total.
 * A failure (database down, migration 008 missing) is logged and retried next interval.
 */

import type { Pool } from 'pg';
import type { Logger } from '../logger.js';
import { readBacklog } from '../ops/backlog.js';
import { PUBLISH_BACKLOG_SQL } from '../ops/backlog-sql.js';
import { withSchema } from '../schema/identifiers.js';

export interface BacklogTaskOptions {
  readonly pool: Pool;
  readonly schema: string;
  readonly quotedSchema: string;
  readonly intervalMs: number;
  readonly logger: Logger;
  readonly relayId: string;
}

export class BacklogTask {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private failing = false;
  private readonly publishSql: string;

  constructor(private readonly o: BacklogTaskOptions) {
    this.publishSql = withSchema(PUBLISH_BACKLOG_SQL, o.quotedSchema);
  }

  /** Publishes at once, then every interval. Idempotent. */
  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => this.tick(), this.o.intervalMs);
    this.timer.unref();
    this.tick();
  }

  /** Stops the timer and waits for a publish in flight. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /** One measurement, unless the previous one is still under way. Never rejects. */
  tick(): Promise<void> {
    this.running ??= this.publish().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  private async publish(): Promise<void> {
    try {
      const backlog = await readBacklog(this.o.pool, { schema: this.o.schema });
      await this.o.pool.query(this.publishSql, [backlog.pending, backlog.dead, this.o.intervalMs]);
      if (this.failing) this.o.logger.info({ relayId: this.o.relayId }, 'backlog published again');
      this.failing = false;
    } catch (error) {
      // Once per outage at warn; the relay loop reports the database itself.
      if (!this.failing) {
        this.o.logger.warn(
          { err: error, relayId: this.o.relayId },
          'could not publish the backlog for enqueue backpressure; retrying every interval',
        );
      }
      this.failing = true;
    }
  }
}
