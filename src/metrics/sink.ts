/**
 * The metrics layer's one abstraction: a {@link MetricsSink} that relay, inbox and ops code
 * record into, whatever the backend. Three backends: prom-client (a `Registry` you pass), the
 * OpenTelemetry metrics API (a `{ meter }` you pass, or `'otel'` for the global meter
 * provider), and a no-op sink (the default) whose handles do nothing.
 */
import { OutboxValidationError } from '../errors.js';
import { type Logger, silentLogger } from '../logger.js';
import { NOOP_SINK } from './noop-sink.js';
import { globalMeter, type MeterLike, OtelSink } from './otel-sink.js';
import { PromSink, type RegistryLike } from './prom-sink.js';

export type { MeterLike } from './otel-sink.js';
export type { RegistryLike } from './prom-sink.js';

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

/**
 * What `createRelay({ metrics })` / `createInbox({ metrics })` accept: a prom-client
 * `Registry` (metrics are registered on it, never on the global registry), an OpenTelemetry
 * `{ meter }`, `'otel'` for the global meter provider's meter (needs `@opentelemetry/api`
 * installed), or a {@link MetricsSink} of your own. Absent: nothing is recorded.
 */
export type MetricsOption = RegistryLike | { readonly meter: MeterLike } | 'otel' | MetricsSink;

/** The name every tx-outbox meter goes by in OpenTelemetry. */
export const METER_NAME = 'tx-outbox';

function isRegistry(value: object): value is RegistryLike {
  const r = value as Partial<RegistryLike>;
  return (
    typeof r.getSingleMetric === 'function' &&
    typeof r.registerMetric === 'function' &&
    typeof r.metrics === 'function'
  );
}

function isSink(value: object): value is MetricsSink {
  const s = value as Partial<MetricsSink>;
  return (
    typeof s.enabled === 'boolean' &&
    typeof s.counter === 'function' &&
    typeof s.histogram === 'function' &&
    typeof s.gauge === 'function' &&
    typeof s.collect === 'function'
  );
}

function isMeter(value: unknown): value is MeterLike {
  const m = value as Partial<MeterLike> | undefined;
  return (
    typeof m?.createCounter === 'function' &&
    typeof m.createHistogram === 'function' &&
    typeof m.createObservableGauge === 'function' &&
    typeof m.addBatchObservableCallback === 'function'
  );
}

/**
 * The sink for a `metrics` option, with `constLabels` on every series; the no-op sink when
 * `option` is undefined. A sink passed in is used as it is (its own constant labels stand).
 * Throws {@link OutboxValidationError} for anything else.
 */
export function resolveMetrics(
  option: MetricsOption | undefined,
  constLabels: MetricLabels = {},
  logger: Logger = silentLogger,
  field = 'metrics',
): MetricsSink {
  if (option === undefined) return NOOP_SINK;
  if (option === 'otel') return new OtelSink(globalMeter(field, METER_NAME), constLabels, logger);
  if (typeof option === 'object' && option !== null) {
    if (isSink(option)) return option;
    if (isRegistry(option)) return new PromSink(option, constLabels, logger);
    if ('meter' in option) {
      if (isMeter(option.meter)) return new OtelSink(option.meter, constLabels, logger);
      throw new OutboxValidationError(
        `${field}.meter`,
        'is not an OpenTelemetry Meter',
        "Pass metrics.getMeter('tx-outbox') from @opentelemetry/api, or 'otel' for the global meter provider.",
      );
    }
  }
  throw new OutboxValidationError(
    field,
    'is not a prom-client Registry, { meter }, or "otel"',
    "Pass new Registry() from prom-client, { meter } from @opentelemetry/api, or 'otel'.",
  );
}
