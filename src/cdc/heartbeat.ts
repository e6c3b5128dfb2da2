// STAND-IN (core): replaced by control's src/cdc/heartbeat.ts when merged.
import type { Pool } from 'pg';
import type { Logger } from '../logger.js';

export class Heartbeat {
  #timer: NodeJS.Timeout | undefined;
  constructor(private readonly o: { pool: Pool; prefix: string; intervalMs: number; logger: Logger }) {}
  start(): void {
    this.#timer ??= setInterval(() => {
      this.o.pool
        .query(`SELECT pg_logical_emit_message(false, $1, '')`, [this.o.prefix])
        .catch((e: unknown) => this.o.logger.warn({ err: e }, 'heartbeat failed'));
    }, this.o.intervalMs);
    this.#timer.unref();
  }
  async stop(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
