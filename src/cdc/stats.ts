import type { CounterMetric, GaugeMetric, MetricsSink } from '../metrics/sink.js';

/** The stream's side of `stats()`. */
export interface CdcStats {
  /** The slot: the one given, or this database's default once start() resolved it (before: undefined). */
  readonly slot: string | undefined;
  /** A replication stream is open and this relay holds every partition. */
  readonly streaming: boolean;
  /** The slot position this relay confirmed last (`16/B374D848`), if any. */
  readonly confirmedLsn: string | undefined;
  /** The WAL position the server last said it had sent this relay up to (its keepalives). */
  readonly serverLsn: string | undefined;
  /**
   * `pg_current_wal_lsn() − confirmed_flush_lsn` of the slot, bytes: the WAL it has not confirmed,
   * as last sampled from pg_replication_slots (every `backlogIntervalMs`); 0 until then.
   */
  readonly lagBytes: number;
  /**
   * `pg_current_wal_lsn() − restart_lsn` of the slot, bytes: the WAL PostgreSQL keeps for it (at
   * least `lagBytes`; bounded by `max_slot_wal_keep_size`), sampled with `lagBytes`.
   */
  readonly retainedBytes: number;
  /** Age of the oldest streamed transaction not settled yet, s (0 when none). */
  readonly lagSeconds: number;
  /** Streams opened again after a failure. */
  readonly reconnects: number;
  /** Streamed events handed over to the polling path. */
  readonly handovers: number;
  /** Aggregates the polling path owns now. */
  readonly polled: number;
  /**
   * WAL-mode messages refused (not published, not stored): not authenticated, or in format 1
   * where it is not read (src/cdc/wal-auth.ts).
   */
  readonly refusedMessages: number;
}

/** Reasons of `tx_outbox_cdc_reconnects_total`. */
export type ReconnectReason = 'silent' | 'slot_active' | 'fenced' | 'leases_lost' | 'error';

export const CDC_METRICS = {
  lagBytes: [
    'tx_outbox_cdc_slot_lag_bytes',
    "WAL the CDC slot has not confirmed: pg_current_wal_lsn() minus the slot's confirmed_flush_lsn, bytes.",
  ],
  retainedBytes: [
    'tx_outbox_cdc_slot_retained_bytes',
    "WAL PostgreSQL keeps for the CDC slot: pg_current_wal_lsn() minus the slot's restart_lsn, bytes.",
  ],
  lagSeconds: [
    'tx_outbox_cdc_slot_lag_seconds',
    'Age of the oldest streamed transaction the CDC relay has not settled yet, seconds.',
  ],
  streaming: ['tx_outbox_cdc_streaming', '1 while the CDC relay streams (holds every partition), else 0.'],
  reconnects: [
    'tx_outbox_cdc_reconnects_total',
    'Replication streams opened again after a failure, by reason.',
  ],
  refused: [
    'tx_outbox_cdc_refused_messages_total',
    'WAL-mode messages the CDC relay refused (not published, not stored), by reason: unauthenticated, format_1, invalid.',
  ],
} as const;

/** The CDC relay's gauges and counter, on the relay's sink. */
export class CdcMetrics {
  private readonly lagBytes: GaugeMetric | undefined;
  private readonly retainedBytes: GaugeMetric | undefined;
  private readonly lagSecondsGauge: GaugeMetric | undefined;
  private readonly streamingGauge: GaugeMetric | undefined;
  private readonly reconnectCount: CounterMetric | undefined;
  /** tx_outbox_cdc_refused_messages_total{reason}, counted by WalRefusals (src/cdc/wal-auth.ts). */
  readonly refused: CounterMetric | undefined;

  constructor(sink: MetricsSink) {
    if (!sink.enabled) return;
    this.lagBytes = sink.gauge(...CDC_METRICS.lagBytes);
    this.retainedBytes = sink.gauge(...CDC_METRICS.retainedBytes);
    this.lagSecondsGauge = sink.gauge(...CDC_METRICS.lagSeconds);
    this.streamingGauge = sink.gauge(...CDC_METRICS.streaming);
    this.reconnectCount = sink.counter(...CDC_METRICS.reconnects, ['reason']);
    this.refused = sink.counter(...CDC_METRICS.refused, ['reason']);
  }

  /** The slot as sampled from pg_replication_slots. */
  slot(lagBytes: number, retainedBytes: number): void {
    this.lagBytes?.set(undefined, lagBytes);
    this.retainedBytes?.set(undefined, retainedBytes);
  }

  lagSeconds(seconds: number): void {
    this.lagSecondsGauge?.set(undefined, seconds);
  }

  streaming(on: boolean): void {
    this.streamingGauge?.set(undefined, on ? 1 : 0);
  }

  reconnect(reason: ReconnectReason): void {
    this.reconnectCount?.inc({ reason });
  }
}
