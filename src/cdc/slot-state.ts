import type { Pool } from 'pg';
import type { Logger } from '../logger.js';
import { withSchema } from '../schema/identifiers.js';
import { formatLsn } from './lsn.js';
import { cdcSlotStatus } from './setup.js';
import type { CdcMetrics, CdcStats } from './stats.js';
import type { StreamCounters } from './stream-state.js';

/** `cdc_state` (migration 11): the stream's position and lag, for `tx-outbox status`. */
const CDC_STATE_SQL = `
INSERT INTO {{schema}}.cdc_state AS s (slot_name, relay_id, confirmed_lsn, lag_seconds, measured_at)
VALUES ($1, $2, $3::pg_lsn, $4, now())
ON CONFLICT (slot_name) DO UPDATE
SET relay_id = excluded.relay_id, confirmed_lsn = excluded.confirmed_lsn,
    lag_seconds = excluded.lag_seconds, measured_at = excluded.measured_at`;

export interface SlotStateParts {
  readonly pool: Pool;
  readonly schema: string;
  readonly quotedSchema: string;
  readonly relayId: string;
  readonly logger: Logger;
  readonly metrics: CdcMetrics;
  /** The slot given in the options (undefined: this database's default). */
  readonly slot: string | undefined;
  readonly publication: string;
  readonly counters: StreamCounters;
  /** The slot start() resolved, if it ran. */
  readonly resolvedSlot: () => string | undefined;
  /** Streaming now: the oldest streamed transaction not settled yet, if any. */
  readonly streaming: () => { oldestPending: Date | undefined } | undefined;
  /** The aggregates the hand-over source owns now, and WAL-mode messages refused. */
  readonly polled: () => number;
  readonly refusedMessages: () => number;
}

/** The stream's side of `stats()`, the slot's lag as PostgreSQL counts it, and `cdc_state`. */
export class SlotState {
  /** The slot as last sampled from pg_replication_slots ({@link sample}). */
  #sample = { lagBytes: 0, retainedBytes: 0 };
  /** The last sample failed (logged once a streak). */
  #failing = false;
  readonly #stateSql: string;

  constructor(private readonly p: SlotStateParts) {
    this.#stateSql = withSchema(CDC_STATE_SQL, p.quotedSchema);
  }

  stats(): CdcStats {
    const p = this.p;
    const { confirmed, server } = p.counters;
    const oldest = p.streaming()?.oldestPending;
    return {
      slot: p.resolvedSlot() ?? p.slot,
      streaming: p.streaming() !== undefined,
      confirmedLsn: confirmed > 0n ? formatLsn(confirmed) : undefined,
      serverLsn: server > 0n ? formatLsn(server) : undefined,
      lagBytes: this.#sample.lagBytes,
      retainedBytes: this.#sample.retainedBytes,
      lagSeconds: oldest ? Math.max(0, (Date.now() - oldest.getTime()) / 1000) : 0,
      reconnects: p.counters.reconnects,
      handovers: p.counters.handovers,
      polled: p.polled(),
      refusedMessages: p.refusedMessages(),
    };
  }

  /** Every `backlogIntervalMs`: the slot sampled, the lag gauge, and `cdc_state` while streaming. */
  async write(): Promise<void> {
    const p = this.p;
    await this.sample();
    const stats = this.stats();
    p.metrics.lagSeconds(stats.lagSeconds);
    const slot = p.resolvedSlot();
    if (!p.streaming() || stats.confirmedLsn === undefined || slot === undefined) return;
    await p.pool
      .query(this.#stateSql, [slot, p.relayId, stats.confirmedLsn, stats.lagSeconds])
      .catch((error: unknown) => {
        // Before migration 11 there is no cdc_state: nothing to write, quietly.
        if ((error as { code?: unknown }).code !== '42P01')
          p.logger.warn({ err: error, relayId: p.relayId }, 'could not write cdc_state');
      });
  }

  /**
   * The slot's lag and retained WAL as PostgreSQL counts them (`cdc status`'s reading, every
   * `backlogIntervalMs`, standby or streaming): what the relay knows from its stream is only what
   * the server sent it, not the WAL the slot holds back.
   */
  async sample(): Promise<void> {
    const p = this.p;
    try {
      // Before start() resolved the names, cdcSlotStatus resolves the default itself.
      const status = await cdcSlotStatus(p.pool, {
        schema: p.schema,
        slot: p.resolvedSlot() ?? p.slot,
        publication: p.publication,
      });
      this.#failing = false;
      if (!status.exists) return;
      this.#sample = { lagBytes: status.lagBytes ?? 0, retainedBytes: status.retainedBytes ?? 0 };
      p.metrics.slot(this.#sample.lagBytes, this.#sample.retainedBytes);
    } catch (error) {
      if (!this.#failing)
        p.logger.warn(
          { err: error, relayId: p.relayId },
          'could not read the slot lag (pg_replication_slots)',
        );
      this.#failing = true;
    }
  }
}
