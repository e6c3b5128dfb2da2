/**
 * The sink for a `metrics` option. Three backends: prom-client (a `Registry` you pass), the
 * OpenTelemetry metrics API (a `{ meter }` you pass, or `'otel'` for the global meter
 * provider), and a no-op sink (the default) whose handles do nothing.
 */
import { OutboxValidationError } from '../errors.js';
import { type Logger, silentLogger } from '../logger.js';
import { NOOP_SINK } from './noop-sink.js';
import { globalMeter, type MeterLike, OtelSink } from './otel-sink.js';
import { PromSink, type RegistryLike } from './prom-sink.js';
import type { MetricLabels, MetricsSink } from './sink.js';

export type { MeterLike } from './otel-sink.js';
export type { RegistryLike } from './prom-sink.js';

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
