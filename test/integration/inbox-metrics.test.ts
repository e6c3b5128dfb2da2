import { randomUUID } from 'node:crypto';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox } from '../../src/inbox/inbox.js';
import type { InboxMessage } from '../../src/inbox/message.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { sample as sampleOf } from '../helpers/metrics.js';

let db: TestDb;
beforeAll(async () => {
  db = await createTestDb('inbox_metrics');
});
afterAll(async () => {
  await db?.close();
});

function message(aggregateId: string, sequence: number, extra: Partial<InboxMessage> = {}): InboxMessage {
  return {
    eventId: randomUUID(),
    type: 'stock.reserved',
    aggregateType: 'order',
    aggregateId,
    sequence,
    schemaVersion: 1,
    payload: Buffer.from('{}'),
    headers: {},
    ...extra,
  };
}

/** A series that is not there reads NaN here: an absent series never passes for 0. */
const sample = (registry: Registry, name: string, labels: Record<string, string> = {}) =>
  sampleOf(registry, name, labels, Number.NaN);

const applied = async (): Promise<void> => {};

describe('inbox metrics', () => {
  it('counts every outcome per consumer, times the handler, and measures lag from ce-time', async () => {
    const registry = new Registry();
    const consumer = `c-${randomUUID().slice(0, 8)}`;
    const inbox = createInbox({
      pool: db.pool,
      consumer,
      schema: db.schema,
      metrics: registry,
      maxAttempts: 1,
      accepts: [{ type: 'stock.reserved', schemaVersion: 1 }],
    });
    const created = new Date(Date.now() - 1500).toISOString();
    const first = message('a', 1, { headers: { 'ce-time': created } });
    expect((await inbox.handle(first, applied)).status).toBe('processed');
    expect((await inbox.handle(first, applied)).status).toBe('duplicate');
    expect((await inbox.handle(message('a', 2), applied)).status).toBe('processed');
    expect((await inbox.handle(message('a', 1), applied)).status).toBe('stale');
    expect((await inbox.handle(message('a', 5), applied)).status).toBe('deferred');
    expect((await inbox.handle(message('b', 1, { type: 'unknown.type' }), applied)).status).toBe(
      'quarantined',
    );
    const failing = async () => {
      throw new Error('handler bug');
    };
    expect((await inbox.handle(message('c', 1), failing)).status).toBe('quarantined');

    const outcome = (o: string) =>
      sample(registry, 'tx_outbox_inbox_messages_total', { consumer, outcome: o });
    expect(await outcome('processed')).toBe(2);
    expect(await outcome('duplicate')).toBe(1);
    expect(await outcome('stale')).toBe(1);
    expect(await outcome('deferred')).toBe(1);
    expect(await outcome('quarantined')).toBe(2);
    // A skip marker's outcome (dead skip) has its series from the start too.
    expect(await outcome('skipped')).toBe(0);
    expect(inbox.stats()).toEqual({
      processed: 2,
      duplicate: 1,
      stale: 1,
      deferred: 1,
      quarantined: 2,
      skipped: 0,
    });
    // The handler ran for the two processed messages and the failing one.
    expect(await sample(registry, 'tx_outbox_inbox_handler_duration_seconds_count', { consumer })).toBe(3);
    // Lag only for processed messages that carry ce-time: the first one, 1.5 s old.
    expect(await sample(registry, 'tx_outbox_inbox_lag_seconds_count', { consumer })).toBe(1);
    const lag = await sample(registry, 'tx_outbox_inbox_lag_seconds_sum', { consumer });
    expect(lag).toBeGreaterThanOrEqual(1.5);
    expect(lag).toBeLessThan(60);
  });

  it('a ce-time no lag explains (1970, a forged header) is not observed', async () => {
    const registry = new Registry();
    const consumer = 'lag-guard';
    const inbox = createInbox({ pool: db.pool, schema: db.schema, consumer, metrics: registry });
    const handler = async () => undefined;
    await inbox.handle(message('x', 1, { headers: { 'ce-time': '1970-01-01T00:00:00Z' } }), handler);
    await inbox.handle(
      message('y', 1, { headers: { 'ce-time': new Date(Date.now() - 2000).toISOString() } }),
      handler,
    );
    expect(await sample(registry, 'tx_outbox_inbox_lag_seconds_count', { consumer })).toBe(1);
    expect(await sample(registry, 'tx_outbox_inbox_lag_seconds_sum', { consumer })).toBeLessThan(60);
  });

  it('two inboxes on one registry get a series each, no throw; the same through OpenTelemetry', async () => {
    const registry = new Registry();
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
    const provider = new MeterProvider({ readers: [reader] });
    const meter = provider.getMeter('tx-outbox');
    const names = ['inv', 'mail'].map((n) => `${n}-${randomUUID().slice(0, 8)}`);
    for (const consumer of names) {
      const prom = createInbox({ pool: db.pool, consumer, schema: db.schema, metrics: registry });
      const otel = createInbox({
        pool: db.pool,
        consumer: `${consumer}-o`,
        schema: db.schema,
        metrics: { meter },
      });
      for (const inbox of [prom, otel]) {
        const m = message('x', 1);
        await inbox.handle(m, applied);
        await inbox.handle(m, applied);
      }
    }
    for (const consumer of names) {
      expect(
        await sample(registry, 'tx_outbox_inbox_messages_total', { consumer, outcome: 'processed' }),
      ).toBe(1);
      expect(
        await sample(registry, 'tx_outbox_inbox_messages_total', { consumer, outcome: 'duplicate' }),
      ).toBe(1);
    }
    await reader.forceFlush();
    const metrics = exporter.getMetrics().at(-1)!.scopeMetrics[0]!.metrics;
    const points = metrics.find((m) => m.descriptor.name === 'tx_outbox_inbox_messages_total')!.dataPoints;
    const seen = points
      .filter((p) => p.value !== 0)
      .map((p) => [p.attributes['consumer'], p.attributes['outcome'], p.value]);
    expect(seen.sort()).toEqual(
      names
        .flatMap((n) => [
          [`${n}-o`, 'duplicate', 1],
          [`${n}-o`, 'processed', 1],
        ])
        .sort(),
    );
    await provider.shutdown();
  });
});
