import { readFileSync } from 'node:fs';
import { metrics } from '@opentelemetry/api';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { Registry, register } from 'prom-client';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { silentLogger } from '../../src/logger.js';
import { CollectHub } from '../../src/metrics/collect-hub.js';
import { failureCode } from '../../src/metrics/error-code.js';
import { INBOX_METRICS, NOOP_INBOX_METRICS } from '../../src/metrics/inbox-metrics.js';
import { NOOP_SINK } from '../../src/metrics/noop-sink.js';
import {
  ClockOffset,
  NOOP_RELAY_METRICS,
  RELAY_METRICS,
  SinkRelayMetrics,
} from '../../src/metrics/relay-metrics.js';
import { resolveMetrics } from '../../src/metrics/resolve.js';
import type { OutboxMessage } from '../../src/publishers/contract.js';
import { resolveRelayOptions } from '../../src/relay/options.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

const fakePool = { connect: () => undefined, options: { max: 10 } } as never;

function message(createdAt: Date): OutboxMessage {
  return {
    id: '1',
    eventId: '0190f5a4-8d3c-7bbb-9b1e-000000000042',
    aggregateType: 'order',
    aggregateId: 'o-1',
    sequence: 1,
    type: 'order.placed',
    schemaVersion: 1,
    topic: null,
    payload: Buffer.from('{}'),
    contentType: 'application/json',
    headers: {},
    createdAt,
    attempts: 0,
  };
}

/** The value of one series in a registry's JSON. */
async function value(registry: Registry, name: string, labels: Record<string, string> = {}): Promise<number> {
  const metric = (await registry.getMetricsAsJSON()).find((m) => m.name === name);
  const series = (metric?.values ?? []).find((v) =>
    Object.entries(labels).every(([k, want]) => String(v.labels[k]) === want),
  );
  return series?.value ?? Number.NaN;
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('no metrics option', () => {
  it('resolves to the no-op sink and no-op relay metrics, and registers nothing anywhere', () => {
    const before = register.getMetricsAsArray().length;
    const o = resolveRelayOptions({ pool: fakePool, publisher: new RecordingPublisher() });
    expect(o.metricsSink).toBe(NOOP_SINK);
    expect(o.metrics).toBe(NOOP_RELAY_METRICS);
    expect(resolveMetrics(undefined, { schema: 'x' })).toBe(NOOP_SINK);
    expect(register.getMetricsAsArray().length).toBe(before);
  });

  it('reads no clock on the hot path', () => {
    const now = vi.spyOn(Date, 'now');
    const perf = vi.spyOn(performance, 'now');
    NOOP_RELAY_METRICS.called([message(new Date())], [{ ok: true }]);
    NOOP_RELAY_METRICS.recorded(1, [{ status: 'dead' }]);
    NOOP_INBOX_METRICS.handlerDone(NOOP_INBOX_METRICS.handlerStarted());
    expect(now).not.toHaveBeenCalled();
    expect(perf).not.toHaveBeenCalled();
  });
});

describe('resolveMetrics', () => {
  it('refuses what is neither a registry, a meter nor a sink, naming the field', () => {
    expect(() => resolveMetrics({} as never)).toThrow(OutboxValidationError);
    expect(() => resolveMetrics({ meter: {} } as never)).toThrow(/metrics\.meter/);
    expect(() => resolveMetrics('prom' as never)).toThrow(/metrics:/);
  });

  it("'otel' records through the global meter provider", async () => {
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
    const provider = new MeterProvider({ readers: [reader] });
    expect(metrics.setGlobalMeterProvider(provider)).toBe(true);
    try {
      resolveMetrics('otel', { schema: 'g' }).counter('tx_outbox_global_total', 'h').inc();
      await reader.forceFlush();
      const scope = exporter.getMetrics().at(-1)!.scopeMetrics[0]!;
      expect(scope.scope.name).toBe('tx-outbox');
      expect(scope.metrics[0]!.descriptor.name).toBe('tx_outbox_global_total');
    } finally {
      metrics.disable();
      await provider.shutdown();
    }
  });

  it('passes a sink through as it is', () => {
    const sink = resolveMetrics(new Registry());
    expect(resolveMetrics(sink, { other: 'x' })).toBe(sink);
  });
});

describe('prom-client sink', () => {
  it('registers on the given registry only, with the constant labels on every series', async () => {
    const registry = new Registry();
    const sink = resolveMetrics(registry, { schema: 'outbox', publisher: 'nats' });
    sink.counter('tx_outbox_test_total', 'help', ['reason']).inc({ reason: 'r' }, 2);
    expect(
      await value(registry, 'tx_outbox_test_total', { schema: 'outbox', publisher: 'nats', reason: 'r' }),
    ).toBe(2);
    expect(register.getSingleMetric('tx_outbox_test_total')).toBeUndefined();
  });

  it('reuses a metric already on the registry (two relays in one process) instead of throwing', async () => {
    const registry = new Registry();
    const a = resolveMetrics(registry, { schema: 's', publisher: 'a' });
    const b = resolveMetrics(registry, { schema: 's', publisher: 'b' });
    a.counter('tx_outbox_x_total', 'h').inc();
    b.counter('tx_outbox_x_total', 'h').inc(undefined, 5);
    a.gauge('tx_outbox_g', 'h').add(undefined, 3);
    b.gauge('tx_outbox_g', 'h').add(undefined, 4);
    a.histogram('tx_outbox_h_seconds', 'h', [], [1]).observe(undefined, 0.5);
    b.histogram('tx_outbox_h_seconds', 'h', [], [1]).observe(undefined, 0.5);
    expect(await value(registry, 'tx_outbox_x_total', { publisher: 'a' })).toBe(1);
    expect(await value(registry, 'tx_outbox_x_total', { publisher: 'b' })).toBe(5);
    expect(await value(registry, 'tx_outbox_g', { publisher: 'b' })).toBe(4);
  });

  it('refuses a name registered as another type', () => {
    const registry = new Registry();
    const sink = resolveMetrics(registry);
    sink.counter('tx_outbox_clash', 'h');
    expect(() => sink.gauge('tx_outbox_clash', 'h')).toThrow(/already registered as a counter/);
  });

  it('runs a collect callback once per scrape, however many gauges, and before they are read', async () => {
    const registry = new Registry();
    const sink = resolveMetrics(registry, { schema: 's' });
    const a = sink.gauge('tx_outbox_a', 'h');
    const b = sink.gauge('tx_outbox_b', 'h', ['partition']);
    const c = sink.gauge('tx_outbox_c', 'h');
    let runs = 0;
    sink.collect(async () => {
      runs += 1;
      await new Promise((r) => setTimeout(r, 5));
      a.set(undefined, runs);
      b.set({ partition: '3' }, 10 * runs);
      c.set(undefined, 100 * runs);
    });
    const text = await registry.metrics();
    expect(runs).toBe(1);
    expect(text).toContain('tx_outbox_a{schema="s"} 1');
    expect(text).toContain('tx_outbox_b{schema="s",partition="3"} 10');
    expect(text).toContain('tx_outbox_c{schema="s"} 100');
    await registry.metrics();
    expect(runs).toBe(2);
  });

  it('serves the other metrics when a collect callback fails, and counts the failure', async () => {
    const registry = new Registry();
    const warnings: unknown[] = [];
    const logger = { warn: (o: unknown) => warnings.push(o) } as never;
    const sink = resolveMetrics(registry, { schema: 's' }, logger);
    const g = sink.gauge('tx_outbox_pending_test', 'h');
    g.set(undefined, 7);
    sink.counter('tx_outbox_ok_total', 'h').inc();
    const unregister = sink.collect(() => Promise.reject(new Error('database down')));
    const text = await registry.metrics();
    expect(text).toContain('tx_outbox_ok_total{schema="s"} 1');
    expect(text).toContain('tx_outbox_pending_test{schema="s"} 7');
    expect(text).toContain('tx_outbox_scrape_errors_total 1');
    expect(warnings).toHaveLength(1);
    unregister();
    await registry.metrics();
    expect(await value(registry, 'tx_outbox_scrape_errors_total')).toBe(1);
  });
});

describe('relay metrics', () => {
  it('measures commit to publish on the database clock: the offset is added to the ack time', async () => {
    const registry = new Registry();
    const m = new SinkRelayMetrics(resolveMetrics(registry, { schema: 's', publisher: 'p' }), 'custom');
    // The database clock runs 30 s ahead of ours: an event it stamped 2 s before the ack (on its
    // clock) is 2 s old, not 32 s or -28 s.
    m.clockOffset(30_000, 1);
    m.called([message(new Date(Date.now() + 30_000 - 2_000))], [{ ok: true }]);
    const h = (await registry.getMetricsAsJSON()).find(
      (x) => x.name === 'tx_outbox_commit_to_publish_seconds',
    );
    const sum =
      h?.values.find(
        (v) => (v as { metricName?: string }).metricName === 'tx_outbox_commit_to_publish_seconds_sum',
      )?.value ?? 0;
    expect(sum).toBeGreaterThanOrEqual(2);
    expect(sum).toBeLessThan(3);
  });

  it('takes the clock offset of the reading with the shortest round trip among the last few', () => {
    const offset = new ClockOffset(3);
    expect(offset.ms).toBe(0);
    offset.add(100, 2);
    offset.add(900, 50); // waited for a pool connection: less trustworthy
    expect(offset.ms).toBe(100);
    offset.add(120, 4);
    offset.add(130, 6); // the 2 ms reading is now out of the window
    expect(offset.ms).toBe(120);
  });

  it('labels failures by a bounded code', () => {
    expect(failureCode(Object.assign(new Error('x'), { code: 'ECONNREFUSED' }))).toBe('ECONNREFUSED');
    expect(failureCode(new Error('x', { cause: Object.assign(new Error('y'), { code: 'ETIMEDOUT' }) }))).toBe(
      'ETIMEDOUT',
    );
    expect(failureCode(Object.assign(new Error('x'), { code: 'SOMETHING_NEW_42' }))).toBe('other');
    expect(failureCode(new Error('x'))).toBe('other');
  });
});

describe('OpenTelemetry sink', () => {
  it('records counters, histograms and gauges (set from one collect callback per collection)', async () => {
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
    const provider = new MeterProvider({ readers: [reader] });
    const meter = provider.getMeter('tx-outbox');
    const sink = resolveMetrics({ meter }, { schema: 's' });
    const again = resolveMetrics({ meter }, { schema: 't' });
    sink.counter('tx_outbox_c_total', 'h', ['reason']).inc({ reason: 'r' }, 3);
    again.counter('tx_outbox_c_total', 'h', ['reason']).inc({ reason: 'r' });
    sink.histogram('tx_outbox_h_seconds', 'h', [], [0.1, 1]).observe(undefined, 0.5);
    const a = sink.gauge('tx_outbox_a', 'h');
    const b = again.gauge('tx_outbox_b', 'h');
    let runs = 0;
    sink.collect(() => {
      runs += 1;
      a.set(undefined, 11);
      b.add(undefined, 2);
    });
    await reader.forceFlush();
    expect(runs).toBe(1);
    const metrics = exporter.getMetrics().at(-1)!.scopeMetrics[0]!.metrics;
    const points = (name: string) => metrics.find((m) => m.descriptor.name === name)?.dataPoints ?? [];
    expect(points('tx_outbox_c_total').map((p) => [p.attributes, p.value])).toEqual([
      [{ schema: 's', reason: 'r' }, 3],
      [{ schema: 't', reason: 'r' }, 1],
    ]);
    expect(points('tx_outbox_a').map((p) => [p.attributes, p.value])).toEqual([[{ schema: 's' }, 11]]);
    expect(points('tx_outbox_b').map((p) => [p.attributes, p.value])).toEqual([[{ schema: 't' }, 2]]);
    const h = points('tx_outbox_h_seconds')[0]!.value as { count: number; buckets: { boundaries: number[] } };
    expect(h.count).toBe(1);
    expect(h.buckets.boundaries).toEqual([0.1, 1]);
    await provider.shutdown();
  });
});

describe('docs/metrics.md', () => {
  it('documents every relay and inbox metric, and the scrape error counter', () => {
    const doc = readFileSync(new URL('../../docs/metrics.md', import.meta.url), 'utf8');
    const names = [...Object.values(RELAY_METRICS), ...Object.values(INBOX_METRICS)].map(([name]) => name);
    for (const name of [...names, 'tx_outbox_scrape_errors_total']) expect(doc).toContain(`\`${name}\``);
  });
});

describe('CollectHub', () => {
  it('a callback that hangs (a database that hangs) does not hang the scrape, and is not piled up', async () => {
    let failures = 0;
    let calls = 0;
    let release: () => void = () => undefined;
    const hub = new CollectHub(() => {
      failures += 1;
    }, 20);
    hub.add(() => {
      calls += 1;
      return new Promise<void>((resolve) => {
        release = resolve;
      });
    }, silentLogger);
    await hub.run();
    expect({ calls, failures }).toEqual({ calls: 1, failures: 1 });
    // Still running: the next scrape does not start it again.
    await hub.run();
    expect({ calls, failures }).toEqual({ calls: 1, failures: 2 });
    release();
    await new Promise((r) => setTimeout(r, 5));
    const done = hub.run();
    release();
    await done;
    expect(calls).toBe(2);
  });
});
