import type { CounterMetric, GaugeMetric, MetricsSink } from '../metrics/sink.js';

/** The stream's side of `stats()`. */
export interface CdcStats {
  /** The slot: the one given, or this database's default once start() resolved it (before: undefined). */
  readonly slot: string | undefined;
  /** A replication stream is open and this relay holds every partition. */
  readonly streaming: boolean;
  /** The slot position this relay confirmed last (`16/B374D848`), if any. */
  readonly confirmedLsn: string | undefined;
  /** The server's WAL end as last seen on the stream. */
  readonly serverLsn: string | undefined;
  /** Server WAL end − confirmed position, bytes. */
  readonly lagBytes: number;
  /** Age of the oldest streamed transaction not settled yet, s (0 when none). */
  readonly lagSeconds: number;
  /** Streams opened again after a failure. */
  readonly reconnects: number;
  /** Streamed events handed over to the polling path. */
  readonly handovers: number;
  /** Aggregates the polling path owns now. */
  readonly polled: number;
}

/** Reasons of `tx_outbox_cdc_reconnects_total`. */
export type ReconnectReason = 'silent' | 'slot_active' | 'fenced' | 'leases_lost' | 'error';

export const CDC_METRICS = {
  lagBytes: [
    'tx_outbox_cdc_slot_lag_bytes',
    'Server WAL end minus the slot position the CDC relay confirmed, bytes.',
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
} as const;

/** The CDC relay's gauges and counter, on the relay's sink. */
export class CdcMetrics {
  private readonly lagBytes: GaugeMetric | undefined;
  private readonly lagSeconds: GaugeMetric | undefined;
  private readonly streamingGauge: GaugeMetric | undefined;
  private readonly reconnectCount: CounterMetric | undefined;

  constructor(sink: MetricsSink) {
    if (!sink.enabled) return;
    this.lagBytes = sink.gauge(...CDC_METRICS.lagBytes);
    this.lagSeconds = sink.gauge(...CDC_METRICS.lagSeconds);
    this.streamingGauge = sink.gauge(...CDC_METRICS.streaming);
    this.reconnectCount = sink.counter(...CDC_METRICS.reconnects, ['reason']);
  }

  lag(bytes: number, seconds: number): void {
    this.lagBytes?.set(undefined, bytes);
    this.lagSeconds?.set(undefined, seconds);
  }

  streaming(on: boolean): void {
    this.streamingGauge?.set(undefined, on ? 1 : 0);
  }

  reconnect(reason: ReconnectReason): void {
    this.reconnectCount?.inc({ reason });
  }
}
