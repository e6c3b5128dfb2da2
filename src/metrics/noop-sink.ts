import type { CounterMetric, GaugeMetric, HistogramMetric, MetricsSink } from './sink.js';

const NOOP_METRIC: CounterMetric & HistogramMetric & GaugeMetric = Object.freeze({
  inc(): void {},
  observe(): void {},
  set(): void {},
  add(): void {},
});

const unregister = (): void => {};

/** The default sink: records nothing, creates nothing. */
export const NOOP_SINK: MetricsSink = Object.freeze({
  enabled: false,
  counter: () => NOOP_METRIC,
  histogram: () => NOOP_METRIC,
  gauge: () => NOOP_METRIC,
  collect: () => unregister,
});
