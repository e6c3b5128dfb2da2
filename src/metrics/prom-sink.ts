import { Counter, Gauge, Histogram, type Metric, type Registry } from 'prom-client';
import { OutboxError } from '../errors.js';
import type { Logger } from '../logger.js';
import { CollectHub, SCRAPE_ERRORS, SCRAPE_ERRORS_HELP } from './collect-hub.js';
import { allLabelNames, withConst } from './labels.js';
import type { CounterMetric, GaugeMetric, HistogramMetric, MetricLabels, MetricsSink } from './sink.js';

/** What the sink needs of a prom-client `Registry`. */
export type RegistryLike = Pick<Registry, 'getSingleMetric' | 'registerMetric' | 'metrics'>;

/** One hub per registry: every relay and inbox on it shares the scrape-time callbacks. */
const hubs = new WeakMap<RegistryLike, CollectHub>();

function hubOf(registry: RegistryLike): CollectHub {
  let hub = hubs.get(registry);
  if (!hub) {
    let errors: Counter | undefined;
    const created = new CollectHub(() => errors?.inc());
    errors =
      existing(registry, SCRAPE_ERRORS, Counter) ??
      new Counter({
        name: SCRAPE_ERRORS,
        help: SCRAPE_ERRORS_HELP,
        registers: [registry as Registry],
        // Read after this scrape's callbacks ran: a failure shows in the scrape it happened in.
        collect: () => created.run(),
      });
    hub = created;
    hubs.set(registry, hub);
  }
  return hub;
}

type MetricClass<T> = abstract new (...args: never[]) => T;

/** The metric already registered under `name` (another relay on this registry), if any. */
function existing<T extends Metric>(
  registry: RegistryLike,
  name: string,
  kind: MetricClass<T>,
): T | undefined {
  const found = registry.getSingleMetric(name);
  if (found === undefined) return undefined;
  if (found instanceof kind) return found;
  // Another copy of prom-client: same shape, different class. Accept it when the type matches.
  const type = (found as { type?: unknown }).type;
  const want =
    kind === (Counter as unknown) ? 'counter' : kind === (Gauge as unknown) ? 'gauge' : 'histogram';
  if (type === want) return found as T;
  throw new OutboxError(`metric ${name} is already registered as a ${String(type)}, not a ${want}`, {
    code: 'TXO_METRIC_CONFLICT',
  });
}

/** Metrics on the user's prom-client registry (never the global one). */
export class PromSink implements MetricsSink {
  readonly enabled = true;
  private readonly hub: CollectHub;

  constructor(
    private readonly registry: RegistryLike,
    private readonly constLabels: MetricLabels,
    private readonly logger: Logger,
  ) {
    this.hub = hubOf(registry);
  }

  counter(name: string, help: string, labelNames: readonly string[] = []): CounterMetric {
    const c =
      existing(this.registry, name, Counter) ??
      new Counter({
        name,
        help,
        labelNames: allLabelNames(this.constLabels, labelNames),
        registers: [this.registry as Registry],
      });
    const constLabels = this.constLabels;
    return {
      inc: (labels, value = 1) => c.inc(withConst(constLabels, labels), value),
    };
  }

  histogram(
    name: string,
    help: string,
    labelNames: readonly string[],
    buckets: readonly number[],
  ): HistogramMetric {
    const h =
      existing(this.registry, name, Histogram) ??
      new Histogram({
        name,
        help,
        labelNames: allLabelNames(this.constLabels, labelNames),
        buckets: [...buckets],
        registers: [this.registry as Registry],
      });
    const constLabels = this.constLabels;
    return { observe: (labels, value) => h.observe(withConst(constLabels, labels), value) };
  }

  gauge(name: string, help: string, labelNames: readonly string[] = []): GaugeMetric {
    const hub = this.hub;
    const g =
      existing(this.registry, name, Gauge) ??
      new Gauge({
        name,
        help,
        labelNames: allLabelNames(this.constLabels, labelNames),
        registers: [this.registry as Registry],
        // Every gauge asks; the gauges of one scrape share one run of the callbacks.
        collect: () => hub.run(),
      });
    const constLabels = this.constLabels;
    return {
      set: (labels, value) => g.set(withConst(constLabels, labels), value),
      add: (labels, delta) => g.inc(withConst(constLabels, labels), delta),
    };
  }

  collect(fn: () => void | Promise<void>): () => void {
    return this.hub.add(fn, this.logger);
  }
}
