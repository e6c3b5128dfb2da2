/**
 * The backlog gauges (docs/metrics.md, "Backlog metrics"), set at scrape time from ONE
 * {@link readBacklog} query: O(partitions), never a scan of the backlog. Label `schema` only
 * (not `publisher`): the backlog belongs to the schema, whichever relay serves the scrape.
 */

import type { Pool } from 'pg';
import { type Logger, silentLogger } from '../logger.js';
import { type MetricsOption, resolveMetrics } from '../metrics/resolve.js';
import type { MetricsSink } from '../metrics/sink.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import { type Backlog, readBacklog } from './backlog.js';

export interface BacklogGaugesOptions {
  /** Outbox schema. Default `outbox`. */
  readonly schema?: string;
  /** Pending events sampled at the head per scrape, see {@link readBacklog}. Default 10,000. */
  readonly sampleSize?: number;
  /** Where a failed scrape-time read is logged. */
  readonly logger?: Logger;
}

interface Registration {
  count: number;
  unregister: () => void;
}

/** One registration per metrics target and schema: two relays on one registry cost one query. */
const registrations = new WeakMap<object, Map<string, Registration>>();
const otelRegistrations = new Map<string, Registration>();

/**
 * Registers the backlog gauges on `metrics` (a prom-client `Registry`, `{ meter }`, `'otel'`
 * or a sink), read from `pool` at every scrape. Registering the same target and schema again
 * shares the first registration. Returns a function that unregisters (the last caller's call
 * stops the reads; the gauges keep their last values).
 */
export function registerBacklogGauges(
  metrics: MetricsOption,
  pool: Pool,
  options: BacklogGaugesOptions = {},
): () => void {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const logger = options.logger ?? silentLogger;
  const byTarget = typeof metrics === 'string' ? otelRegistrations : targetMap(metrics);
  let registration = byTarget.get(schema);
  if (!registration) {
    const sink = resolveMetrics(metrics, { schema }, logger);
    const unregister = collectBacklog(sink, pool, schema, options.sampleSize);
    registration = { count: 0, unregister };
    byTarget.set(schema, registration);
  }
  registration.count += 1;
  let done = false;
  const shared = registration;
  return () => {
    if (done) return;
    done = true;
    shared.count -= 1;
    if (shared.count === 0) {
      shared.unregister();
      byTarget.delete(schema);
    }
  };
}

function targetMap(target: object): Map<string, Registration> {
  let found = registrations.get(target);
  if (!found) {
    found = new Map();
    registrations.set(target, found);
  }
  return found;
}

/** The gauges on one sink and the scrape-time callback that sets them. */
export function collectBacklog(
  sink: MetricsSink,
  pool: Pool,
  schema: string,
  sampleSize?: number,
): () => void {
  if (!sink.enabled) return () => undefined;
  const pending = sink.gauge(
    'tx_outbox_pending_events',
    'Events waiting to be published (estimated beyond the head sample, see docs/metrics.md).',
  );
  const oldest = sink.gauge(
    'tx_outbox_oldest_pending_age_seconds',
    'Age of the oldest due pending event (0: none due); a future deliverAfter is not lag, a retry backoff is.',
  );
  const dead = sink.gauge('tx_outbox_dead_events', 'Dead events (exact); each blocks its aggregate.');
  const partitionPending = sink.gauge(
    'tx_outbox_partition_pending_events',
    "Pending events per partition (the head sample's shares scaled to the total beyond it).",
    ['partition'],
  );
  const partitionOldest = sink.gauge(
    'tx_outbox_partition_oldest_pending_age_seconds',
    'Age of the oldest due pending event per partition (0: none due, or none among the sampled head).',
    ['partition'],
  );
  const unowned = sink.gauge(
    'tx_outbox_partitions_unowned',
    'Partitions without a live lease: nobody publishes their events.',
  );
  const relays = sink.gauge('tx_outbox_relays_live', 'Relays whose heartbeat is within their lease.');
  const set = (b: Backlog): void => {
    pending.set(undefined, b.pending);
    oldest.set(undefined, b.oldestPendingAgeSeconds ?? 0);
    dead.set(undefined, b.dead);
    unowned.set(undefined, b.partitionsUnowned);
    relays.set(undefined, b.relaysLive);
    for (const p of b.partitions) {
      const labels = { partition: String(p.partition) };
      partitionPending.set(labels, p.pending);
      partitionOldest.set(labels, p.oldestPendingAgeSeconds ?? 0);
    }
  };
  return sink.collect(async () => set(await readBacklog(pool, { schema, sampleSize })));
}
