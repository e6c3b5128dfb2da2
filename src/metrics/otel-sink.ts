import { createRequire } from 'node:module';
import { OutboxValidationError } from '../errors.js';
import type { Logger } from '../logger.js';
import { CollectHub, SCRAPE_ERRORS, SCRAPE_ERRORS_HELP } from './collect-hub.js';
import { withConst } from './labels.js';
import type { CounterMetric, GaugeMetric, HistogramMetric, MetricLabels, MetricsSink } from './sink.js';

type Attributes = Record<string, string>;

interface InstrumentOptions {
  description?: string;
  advice?: { explicitBucketBoundaries?: number[] };
}

/** An observable instrument, opaque to the sink. */
export type ObservableLike = object;

/**
 * What the sink needs of an OpenTelemetry `Meter` (`@opentelemetry/api` ≥ 1.9), structurally:
 * tx-outbox does not depend on the API package for this.
 */
export interface MeterLike {
  createCounter(
    name: string,
    options?: InstrumentOptions,
  ): { add(value: number, attributes?: Attributes): void };
  createHistogram(
    name: string,
    options?: InstrumentOptions,
  ): { record(value: number, attributes?: Attributes): void };
  createObservableGauge(name: string, options?: InstrumentOptions): ObservableLike;
  addBatchObservableCallback(
    callback: (result: {
      observe(observable: ObservableLike, value: number, attributes?: Attributes): void;
    }) => void | Promise<void>,
    observables: ObservableLike[],
  ): void;
  removeBatchObservableCallback(
    callback: (result: {
      observe(observable: ObservableLike, value: number, attributes?: Attributes): void;
    }) => void | Promise<void>,
    observables: ObservableLike[],
  ): void;
}

/** The global meter provider's meter (`'otel'`), from `@opentelemetry/api` when it is installed. */
export function globalMeter(field: string, name: string): MeterLike {
  let api: { metrics: { getMeter(name: string): MeterLike } };
  try {
    api = createRequire(import.meta.url)('@opentelemetry/api') as typeof api;
  } catch {
    throw new OutboxValidationError(
      field,
      "is 'otel' but @opentelemetry/api is not installed",
      'npm install @opentelemetry/api, or pass a prom-client Registry.',
    );
  }
  return api.metrics.getMeter(name);
}

interface GaugeState {
  readonly observable: ObservableLike;
  /** Series key → attributes and value, as last set. */
  readonly series: Map<string, { attributes: Attributes; value: number }>;
}

type BatchCallback = Parameters<MeterLike['addBatchObservableCallback']>[0];

/**
 * The instruments of one meter, shared by every sink on it: a name gives the same instrument
 * twice, gauges keep their last values, and ONE batch callback (re-registered when a gauge is
 * added) first runs the scrape-time callbacks, then observes every gauge.
 */
class MeterState {
  readonly counters = new Map<string, ReturnType<MeterLike['createCounter']>>();
  readonly histograms = new Map<string, ReturnType<MeterLike['createHistogram']>>();
  readonly gauges = new Map<string, GaugeState>();
  readonly hub: CollectHub;
  private callback: BatchCallback | undefined;

  constructor(readonly meter: MeterLike) {
    const errors = meter.createCounter(SCRAPE_ERRORS, { description: SCRAPE_ERRORS_HELP });
    this.hub = new CollectHub(() => errors.add(1));
  }

  gauge(name: string, help: string): GaugeState {
    let state = this.gauges.get(name);
    if (state) return state;
    state = { observable: this.meter.createObservableGauge(name, { description: help }), series: new Map() };
    this.gauges.set(name, state);
    this.observeAll();
    return state;
  }

  private observeAll(): void {
    const observables = [...this.gauges.values()].map((g) => g.observable);
    if (this.callback) {
      this.meter.removeBatchObservableCallback(this.callback, observables.slice(0, -1));
    }
    this.callback = async (result) => {
      await this.hub.run();
      for (const g of this.gauges.values()) {
        for (const s of g.series.values()) result.observe(g.observable, s.value, s.attributes);
      }
    };
    this.meter.addBatchObservableCallback(this.callback, observables);
  }
}

const states = new WeakMap<MeterLike, MeterState>();

function stateOf(meter: MeterLike): MeterState {
  let state = states.get(meter);
  if (!state) {
    state = new MeterState(meter);
    states.set(meter, state);
  }
  return state;
}

function seriesKey(attributes: Attributes): string {
  return JSON.stringify(Object.entries(attributes).sort((a, b) => (a[0] < b[0] ? -1 : 1)));
}

/** Metrics through an OpenTelemetry meter: counters, histograms, observable gauges. */
export class OtelSink implements MetricsSink {
  readonly enabled = true;
  private readonly state: MeterState;

  constructor(
    meter: MeterLike,
    private readonly constLabels: MetricLabels,
    private readonly logger: Logger,
  ) {
    this.state = stateOf(meter);
  }

  counter(name: string, help: string): CounterMetric {
    const counters = this.state.counters;
    let c = counters.get(name);
    if (!c) {
      c = this.meterOf().createCounter(name, { description: help });
      counters.set(name, c);
    }
    const counter = c;
    const constLabels = this.constLabels;
    return { inc: (labels, value = 1) => counter.add(value, withConst(constLabels, labels)) };
  }

  histogram(
    name: string,
    help: string,
    _labelNames: readonly string[],
    buckets: readonly number[],
  ): HistogramMetric {
    const histograms = this.state.histograms;
    let h = histograms.get(name);
    if (!h) {
      h = this.meterOf().createHistogram(name, {
        description: help,
        advice: { explicitBucketBoundaries: [...buckets] },
      });
      histograms.set(name, h);
    }
    const histogram = h;
    const constLabels = this.constLabels;
    return { observe: (labels, value) => histogram.record(value, withConst(constLabels, labels)) };
  }

  gauge(name: string, help: string): GaugeMetric {
    const series = this.state.gauge(name, help).series;
    const constLabels = this.constLabels;
    const entry = (labels: MetricLabels | undefined) => {
      const attributes = withConst(constLabels, labels) as Attributes;
      const key = seriesKey(attributes);
      let s = series.get(key);
      if (!s) {
        s = { attributes, value: 0 };
        series.set(key, s);
      }
      return s;
    };
    return {
      set: (labels, value) => {
        entry(labels).value = value;
      },
      add: (labels, delta) => {
        entry(labels).value += delta;
      },
    };
  }

  collect(fn: () => void | Promise<void>): () => void {
    return this.state.hub.add(fn, this.logger);
  }

  private meterOf(): MeterLike {
    return this.state.meter;
  }
}
