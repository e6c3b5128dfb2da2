import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { Registry } from 'prom-client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { brokerUnavailable, PublishError } from '../../src/errors.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import type { OutboxMessage, Publisher, PublishOutcome } from '../../src/publishers/contract.js';
import type { RelayOptions } from '../../src/relay/options.js';
import { createRelay, type Relay } from '../../src/relay/polling/relay.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';
import { sample } from '../helpers/metrics.js';
import { expectNoUnhandledRejections } from '../helpers/unhandled.js';

expectNoUnhandledRejections();

const PARTITIONS = 8;
let db: TestDb;
const relays: Relay[] = [];
beforeAll(async () => {
  db = await createTestDb('relay_metrics', { partitions: PARTITIONS, max: 20 });
});
afterEach(async () => {
  await Promise.all(relays.splice(0).map((r) => r.stop({ timeout: 2000 })));
  await db.pool.query(`DELETE FROM "${db.schema}".events`);
});
afterAll(async () => {
  await db?.close();
});

function relay(publisher: Publisher, extra: Partial<RelayOptions> = {}): Relay {
  const r = createRelay({
    pool: db.pool,
    publisher,
    schema: db.schema,
    pollIntervalMs: 50,
    leaseMs: 3000,
    backoff: { baseMs: 1, capMs: 5 },
    closePublisher: false,
    ...extra,
  });
  relays.push(r);
  return r;
}

async function put(events: OutboxEvent[]): Promise<void> {
  await inTransaction(db.pool, (tx) => enqueue(tx, events, { schema: db.schema }));
}

const events = (n: number, type = 't', prefix = 'a'): OutboxEvent[] =>
  Array.from({ length: n }, (_, i) => ({
    aggregateType: 'o',
    aggregateId: `${prefix}${i % 5}`,
    type,
    payload: { i },
  }));

describe('relay metrics on a prom-client registry', () => {
  it('commit_to_publish counts from when an event was due: a deliverAfter is a schedule, not latency', async () => {
    const registry = new Registry();
    await put([
      {
        aggregateType: 'o',
        aggregateId: 'scheduled',
        type: 't',
        payload: {},
        deliverAfter: new Date(Date.now() + 3_600_000),
      },
    ]);
    // Enqueued an hour ago for "now": due since a moment ago.
    await db.pool.query(
      `UPDATE "${db.schema}".events SET created_at = now() - interval '1 hour', deliver_after = now(), next_attempt_at = now()`,
    );
    const r = relay(new RecordingPublisher(), { metrics: registry });
    await r.start();
    await waitFor(() => r.stats().published === 1, { what: 'published' });
    const own = { schema: db.schema, publisher: 'recording' };
    expect(await sample(registry, 'tx_outbox_commit_to_publish_seconds_count', own)).toBe(1);
    expect(await sample(registry, 'tx_outbox_commit_to_publish_seconds_sum', own)).toBeLessThan(60);
  });

  it('counts a drain: published, attempts by broker, batch sizes, step times, latency, leases', async () => {
    const registry = new Registry();
    const publisher = new RecordingPublisher();
    await put(events(40));
    const r = relay(publisher, { metrics: registry, batchSize: 16 });
    await r.start();
    await waitFor(() => r.stats().published === 40, { what: '40 published' });
    const own = { schema: db.schema, publisher: 'recording' };
    expect(await sample(registry, 'tx_outbox_events_published_total', own)).toBe(40);
    expect(await sample(registry, 'tx_outbox_publish_attempts_total', { ...own, broker: 'custom' })).toBe(40);
    expect(await sample(registry, 'tx_outbox_batch_size_events_sum', own)).toBe(40);
    expect(await sample(registry, 'tx_outbox_commit_to_publish_seconds_count', own)).toBe(40);
    // Same host, same clock: the latency is small and never negative (the offset estimate is sane).
    const latency = await sample(registry, 'tx_outbox_commit_to_publish_seconds_sum', own);
    expect(latency).toBeGreaterThanOrEqual(0);
    expect(latency / 40).toBeLessThan(15);
    const batches = r.stats().batches;
    expect(await sample(registry, 'tx_outbox_record_duration_seconds_count', own)).toBe(batches);
    expect(await sample(registry, 'tx_outbox_publish_duration_seconds_count', own)).toBe(batches);
    expect(await sample(registry, 'tx_outbox_claim_duration_seconds_count', own)).toBeGreaterThanOrEqual(
      batches,
    );
    expect(await sample(registry, 'tx_outbox_partitions_held', own)).toBe(PARTITIONS);
    expect(await sample(registry, 'tx_outbox_lease_changes_total', { ...own, change: 'acquired' })).toBe(
      PARTITIONS,
    );
    expect(await sample(registry, 'tx_outbox_events_retried_total', own)).toBe(0);
    await r.stop();
    expect(await sample(registry, 'tx_outbox_partitions_held', own)).toBe(0);
    expect(await sample(registry, 'tx_outbox_lease_changes_total', { ...own, change: 'released' })).toBe(
      PARTITIONS,
    );
  });

  it('counts a lease lost to another relay, and holds one partition fewer', async () => {
    const registry = new Registry();
    const r = relay(new RecordingPublisher(), { metrics: registry });
    await r.start();
    const own = { schema: db.schema, publisher: 'recording' };
    await waitFor(async () => (await sample(registry, 'tx_outbox_partitions_held', own)) === PARTITIONS);
    // Another relay took partition 0 over (a new epoch): the next renewal finds it gone.
    await db.pool.query(
      `UPDATE "${db.schema}".partitions SET owner = 'intruder', epoch = epoch + 1 WHERE partition = 0`,
    );
    await waitFor(
      async () => (await sample(registry, 'tx_outbox_lease_changes_total', { ...own, change: 'lost' })) === 1,
      {
        what: 'the lease lost',
      },
    );
    expect(await sample(registry, 'tx_outbox_partitions_held', own)).toBe(PARTITIONS - 1);
    await r.stop();
    await db.pool.query(`UPDATE "${db.schema}".partitions SET owner = NULL, lease_until = '-infinity'`);
  });

  it('counts failures: retried and dead by reason, failures by code, unavailable', async () => {
    const registry = new Registry();
    const publisher = new RecordingPublisher();
    const tries = new Map<string, number>();
    publisher.verdict = (m: OutboxMessage): PublishOutcome => {
      const n = (tries.get(m.eventId) ?? 0) + 1;
      tries.set(m.eventId, n);
      if (m.type === 'bad')
        return { ok: false, retryable: false, error: new PublishError('rejected', { retryable: false }) };
      if (m.type === 'flaky') {
        const error = Object.assign(new Error('reset'), { code: 'ECONNRESET' });
        return { ok: false, retryable: true, error };
      }
      if (m.type === 'slow-down' && n === 1) {
        return {
          ok: false,
          retryable: true,
          error: new PublishError('429', { retryable: true }),
          retryAfterMs: 1,
        };
      }
      if (m.type === 'down' && n <= 2)
        return { ok: false, retryable: true, error: brokerUnavailable('no broker') };
      return { ok: true };
    };
    await put([
      ...events(1, 'bad', 'bad'),
      ...events(1, 'flaky', 'flaky'),
      ...events(1, 'slow-down', 'slow'),
      ...events(1, 'down', 'down'),
    ]);
    const r = relay(publisher, { metrics: registry, maxAttempts: 3 });
    await r.start();
    await waitFor(() => r.stats().dead === 2 && r.stats().published === 2, { what: '2 dead, 2 published' });
    const own = { schema: db.schema, publisher: 'recording' };
    expect(await sample(registry, 'tx_outbox_events_dead_total', { ...own, reason: 'permanent' })).toBe(1);
    expect(await sample(registry, 'tx_outbox_events_dead_total', { ...own, reason: 'max_attempts' })).toBe(1);
    expect(await sample(registry, 'tx_outbox_events_retried_total', { ...own, reason: 'retryable' })).toBe(2);
    expect(await sample(registry, 'tx_outbox_events_retried_total', { ...own, reason: 'throttled' })).toBe(1);
    expect(await sample(registry, 'tx_outbox_events_unavailable_total', own)).toBe(2);
    const failures = (code: string) =>
      sample(registry, 'tx_outbox_publish_failures_total', { ...own, broker: 'custom', code });
    expect(await failures('TXO_PUBLISH_PERMANENT')).toBe(1);
    expect(await failures('ECONNRESET')).toBe(3);
    expect(await failures('TXO_PUBLISH_RETRYABLE')).toBe(1);
    expect(await failures('TXO_BROKER_UNAVAILABLE')).toBe(2);
    // Every attempt is counted: 1 + 3 + 2 + 3.
    expect(await sample(registry, 'tx_outbox_publish_attempts_total', { ...own, broker: 'custom' })).toBe(9);
  });

  it('counts a publisher that throws as publisher_error, code TXO_PUBLISHER_FAILED', async () => {
    const registry = new Registry();
    let calls = 0;
    const publisher: Publisher = {
      name: 'nats',
      async publish(batch) {
        calls += 1;
        if (calls === 1) throw new Error('client bug');
        return batch.map(() => ({ ok: true }) as const);
      },
      async close() {},
    };
    await put(events(1));
    const r = relay(publisher, { metrics: registry });
    await r.start();
    await waitFor(() => r.stats().published === 1, { what: 'published after the throw' });
    const own = { schema: db.schema, publisher: 'nats' };
    expect(
      await sample(registry, 'tx_outbox_events_retried_total', { ...own, reason: 'publisher_error' }),
    ).toBe(1);
    expect(
      await sample(registry, 'tx_outbox_publish_failures_total', {
        ...own,
        broker: 'nats',
        code: 'TXO_PUBLISHER_FAILED',
      }),
    ).toBe(1);
  });

  it('lets two relays share one registry: no throw, counts add up, partitions held sum to all', async () => {
    const registry = new Registry();
    const publisher = new RecordingPublisher();
    await put(events(30));
    const a = relay(publisher, { metrics: registry });
    const b = relay(publisher, { metrics: registry });
    await a.start();
    await b.start();
    await waitFor(() => a.stats().published + b.stats().published === 30, { what: '30 published' });
    const own = { schema: db.schema, publisher: 'recording' };
    expect(await sample(registry, 'tx_outbox_events_published_total', own)).toBe(30);
    await waitFor(async () => a.stats().partitions.length + b.stats().partitions.length === PARTITIONS);
    await waitFor(async () => (await sample(registry, 'tx_outbox_partitions_held', own)) === PARTITIONS, {
      what: 'partitions held by both',
    });
    const text = await registry.metrics();
    expect(text.match(/^# TYPE tx_outbox_events_published_total counter$/gm)).toHaveLength(1);
  });
});

describe('relay metrics through OpenTelemetry', () => {
  it('shows the same counts as prom-client', async () => {
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
    const provider = new MeterProvider({ readers: [reader] });
    const publisher = new RecordingPublisher();
    publisher.verdict = (m) =>
      m.type === 'bad'
        ? { ok: false, retryable: false, error: new PublishError('no', { retryable: false }) }
        : { ok: true };
    await put([...events(20), ...events(1, 'bad', 'otel-bad')]);
    const r = relay(publisher, { metrics: { meter: provider.getMeter('tx-outbox') } });
    await r.start();
    await waitFor(() => r.stats().published === 20 && r.stats().dead === 1, { what: '20 published, 1 dead' });
    await reader.forceFlush();
    const metrics = exporter.getMetrics().at(-1)!.scopeMetrics[0]!.metrics;
    const points = (name: string) => metrics.find((m) => m.descriptor.name === name)?.dataPoints ?? [];
    const own = { schema: db.schema, publisher: 'recording' };
    expect(points('tx_outbox_events_published_total').map((p) => [p.attributes, p.value])).toEqual([
      [own, 20],
    ]);
    // Every reason's series exists from the start, at 0 until it happens.
    expect(points('tx_outbox_events_dead_total').map((p) => [p.attributes, p.value])).toEqual([
      [{ ...own, reason: 'permanent' }, 1],
      [{ ...own, reason: 'max_attempts' }, 0],
      [{ ...own, reason: 'sequence_repeat' }, 0],
    ]);
    expect(points('tx_outbox_partitions_held').map((p) => p.value)).toEqual([PARTITIONS]);
    const latency = points('tx_outbox_commit_to_publish_seconds')[0]!.value as { count: number };
    expect(latency.count).toBe(20);
    await r.stop();
    await provider.shutdown();
  });
});
