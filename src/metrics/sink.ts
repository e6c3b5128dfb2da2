/**
 * The metrics layer's one abstraction: a {@link MetricsSink} that relay, inbox and ops code
 * record into, whatever the backend. The backends (prom-client, OpenTelemetry, no-op) implement
 * it; `resolve.ts` picks one for a `metrics` option.
 */

/** Label values of one series (without the sink's constant labels). */
export type MetricLabels = Readonly<Record<string, string>>;

/** A monotonic counter. */
export interface CounterMetric {
  inc(labels?: MetricLabels, value?: number): void;
}

/** A histogram with fixed buckets (base units: seconds, bytes, events). */
export interface HistogramMetric {
  observe(labels: MetricLabels | undefined, value: number): void;
}

/** A gauge: set to a value, or moved by a delta (several writers sharing a series add up). */
export interface GaugeMetric {
  set(labels: MetricLabels | undefined, value: number): void;
  add(labels: MetricLabels | undefined, delta: number): void;
}

/**
 * Where metrics go. Every series gets the sink's constant labels (e.g. `schema`, `publisher`);
 * the `labelNames` given are the metric's own. Asking twice for one name (two relays on one
 * registry) returns the same metric.
 */
export interface MetricsSink {
  /** False for the no-op sink: callers may skip work (clock reads, label objects) then. */
  readonly enabled: boolean;
  counter(name: string, help: string, labelNames?: readonly string[]): CounterMetric;
  histogram(
    name: string,
    help: string,
    labelNames: readonly string[],
    buckets: readonly number[],
  ): HistogramMetric;
  gauge(name: string, help: string, labelNames?: readonly string[]): GaugeMetric;
  /**
   * Runs `fn` once per scrape (prom-client) or collection cycle (OpenTelemetry), before the
   * gauges are read, so it can set them from ONE query. A rejected `fn` is logged and counted
   * in `tx_outbox_scrape_errors_total`; the other metrics are still served (the gauges it
   * sets keep their last values). Returns a function that unregisters `fn`.
   */
  collect(fn: () => void | Promise<void>): () => void;
}
