import type { OutboxMessage, PublishOutcome } from '../publishers/contract.js';
import { BATCH_EVENTS, LATENCY_SECONDS, STEP_SECONDS } from './buckets.js';
import { failureCode } from './error-code.js';
import type { CounterMetric, GaugeMetric, HistogramMetric, MetricLabels, MetricsSink } from './sink.js';

const RETRIED_REASONS = ['retryable', 'throttled', 'publisher_error'] as const;
const DEAD_REASONS = ['permanent', 'max_attempts', 'sequence_repeat'] as const;
const LEASE_CHANGES = ['acquired', 'lost', 'released'] as const;

/** `reason` of `tx_outbox_events_retried_total`. */
export type RetriedReason = (typeof RETRIED_REASONS)[number];
/** `reason` of `tx_outbox_events_dead_total`. */
export type DeadReason = (typeof DEAD_REASONS)[number];
export type FailureReason = RetriedReason | DeadReason;
/** A failure as the counters see it; without a reason, `retryable` or `max_attempts`. */
export interface FailureOutcome {
  readonly status: 'pending' | 'dead';
  readonly reason?: FailureReason;
}

/** `change` of `tx_outbox_lease_changes_total`. */
export type LeaseChange = (typeof LEASE_CHANGES)[number];

/**
 * What the relay records. The no-op version ({@link NOOP_RELAY_METRICS}) does nothing, so the
 * relay calls these unconditionally: label objects and clock reads happen only in here.
 */
export interface RelayMetrics {
  claimMs(ms: number): void;
  publishMs(ms: number): void;
  recordMs(ms: number): void;
  /** A claimed batch about to be published. */
  batch(size: number): void;
  /** One publish call's outcomes, just returned (the broker's acks are now). */
  called(batch: readonly OutboxMessage[], outcomes: readonly PublishOutcome[]): void;
  unavailable(count: number): void;
  /** An outcome recorded: `published` events left the outbox, `failures` were rescheduled or dead. */
  recorded(published: number, failures: readonly FailureOutcome[]): void;
  leases(change: LeaseChange, partitions: number): void;
  /** One reading of database clock minus relay clock, ms, from a round trip of `rttMs` (the lease heartbeat). */
  clockOffset(ms: number, rttMs: number): void;
  /** Gaps in caller versions bridged (docs/guarantees.md, Caller versions). */
  gapsBridged(count: number): void;
}

const nothing = (): void => {};

export const NOOP_RELAY_METRICS: RelayMetrics = Object.freeze({
  claimMs: nothing,
  publishMs: nothing,
  recordMs: nothing,
  batch: nothing,
  called: nothing,
  unavailable: nothing,
  recorded: nothing,
  leases: nothing,
  clockOffset: nothing,
  gapsBridged: nothing,
});

/** The relay's metric names and help texts (the shared contract). */
export const RELAY_METRICS = {
  published: [
    'tx_outbox_events_published_total',
    'Events acknowledged by the broker and removed from the outbox.',
  ],
  retried: ['tx_outbox_events_retried_total', 'Failed publishes rescheduled with backoff, by reason.'],
  unavailable: [
    'tx_outbox_events_unavailable_total',
    'Publishes refused because the broker was unreachable (no attempt charged; the event waits).',
  ],
  dead: [
    'tx_outbox_events_dead_total',
    'Events that went dead, by reason (all block their aggregate but sequence_repeat).',
  ],
  gapsBridged: [
    'tx_outbox_events_gap_bridged_total',
    'Aggregates whose next sequence was missing with nothing earlier left, published across the gap.',
  ],
  attempts: ['tx_outbox_publish_attempts_total', 'Events handed to the publisher, by broker kind.'],
  failures: ['tx_outbox_publish_failures_total', 'Failed publish outcomes, by broker kind and error code.'],
  batchSize: ['tx_outbox_batch_size_events', 'Events per claimed batch.'],
  claim: ['tx_outbox_claim_duration_seconds', 'Time of the claim statement per batch that found events.'],
  publish: ['tx_outbox_publish_duration_seconds', 'Time to publish one claimed batch (every wave).'],
  record: ['tx_outbox_record_duration_seconds', 'Time of the outcome statement per batch.'],
  commitToPublish: [
    'tx_outbox_commit_to_publish_seconds',
    'Event created_at (database clock) to broker ack, corrected for the relay-database clock offset.',
  ],
  held: ['tx_outbox_partitions_held', 'Partitions this relay (these relays, on one registry) holds.'],
  leaseChanges: [
    'tx_outbox_lease_changes_total',
    'Partition leases acquired, lost to another relay, or released.',
  ],
} as const;

/** The relay's metrics on a sink whose constant labels are `schema` and `publisher`. */
export class SinkRelayMetrics implements RelayMetrics {
  private readonly published: CounterMetric;
  private readonly retried: CounterMetric;
  private readonly unavailableCount: CounterMetric;
  private readonly dead: CounterMetric;
  private readonly attempts: CounterMetric;
  private readonly failures: CounterMetric;
  private readonly batchSize: HistogramMetric;
  private readonly claim: HistogramMetric;
  private readonly publish: HistogramMetric;
  private readonly record: HistogramMetric;
  private readonly commitToPublish: HistogramMetric;
  private readonly held: GaugeMetric;
  private readonly leaseChanges: CounterMetric;
  private readonly bridged: CounterMetric;
  private readonly brokerLabels: MetricLabels;
  /** Failure labels by code: a handful of values, built once each. */
  private readonly failureLabels = new Map<string, MetricLabels>();
  private readonly offset = new ClockOffset();

  constructor(sink: MetricsSink, broker: string) {
    const m = RELAY_METRICS;
    this.published = sink.counter(...m.published);
    this.retried = sink.counter(...m.retried, ['reason']);
    this.unavailableCount = sink.counter(...m.unavailable);
    this.dead = sink.counter(...m.dead, ['reason']);
    this.attempts = sink.counter(...m.attempts, ['broker']);
    this.failures = sink.counter(...m.failures, ['broker', 'code']);
    this.batchSize = sink.histogram(...m.batchSize, [], BATCH_EVENTS);
    this.claim = sink.histogram(...m.claim, [], STEP_SECONDS);
    this.publish = sink.histogram(...m.publish, [], STEP_SECONDS);
    this.record = sink.histogram(...m.record, [], STEP_SECONDS);
    this.commitToPublish = sink.histogram(...m.commitToPublish, [], LATENCY_SECONDS);
    this.held = sink.gauge(...m.held);
    this.leaseChanges = sink.counter(...m.leaseChanges, ['change']);
    this.bridged = sink.counter(...m.gapsBridged);
    this.brokerLabels = { broker };
    // Series that exist from the start: a rate() over them works before the first event.
    this.published.inc(undefined, 0);
    this.unavailableCount.inc(undefined, 0);
    this.attempts.inc(this.brokerLabels, 0);
    this.held.add(undefined, 0);
    this.bridged.inc(undefined, 0);
    for (const reason of RETRIED_REASONS) this.retried.inc(REASON_LABELS[reason], 0);
    for (const reason of DEAD_REASONS) this.dead.inc(REASON_LABELS[reason], 0);
    for (const change of LEASE_CHANGES) this.leaseChanges.inc(CHANGE_LABELS[change], 0);
  }

  claimMs(ms: number): void {
    this.claim.observe(undefined, ms / 1000);
  }

  publishMs(ms: number): void {
    this.publish.observe(undefined, ms / 1000);
  }

  recordMs(ms: number): void {
    this.record.observe(undefined, ms / 1000);
  }

  batch(size: number): void {
    this.batchSize.observe(undefined, size);
  }

  called(batch: readonly OutboxMessage[], outcomes: readonly PublishOutcome[]): void {
    this.attempts.inc(this.brokerLabels, batch.length);
    // The database clock's "now", on the relay's clock: ack time + offset.
    const ackedOnDbClock = Date.now() + this.offset.ms;
    for (let i = 0; i < batch.length; i++) {
      const outcome = outcomes[i];
      if (outcome === undefined) continue;
      if (outcome.ok) {
        // From when it was due: a deliverAfter in the future is a schedule, not latency.
        const m = batch[i]!;
        const due = Math.max(m.createdAt.getTime(), m.deliverAfter?.getTime() ?? 0);
        const seconds = (ackedOnDbClock - due) / 1000;
        this.commitToPublish.observe(undefined, Math.max(0, seconds));
      } else {
        this.failures.inc(this.failureLabelsOf(failureCode(outcome.error)));
      }
    }
  }

  unavailable(count: number): void {
    if (count > 0) this.unavailableCount.inc(undefined, count);
  }

  recorded(published: number, failures: readonly FailureOutcome[]): void {
    if (published > 0) this.published.inc(undefined, published);
    for (const f of failures) {
      if (f.status === 'dead') this.dead.inc(REASON_LABELS[f.reason ?? 'max_attempts']);
      else this.retried.inc(REASON_LABELS[f.reason ?? 'retryable']);
    }
  }

  leases(change: LeaseChange, partitions: number): void {
    if (partitions === 0) return;
    this.leaseChanges.inc(CHANGE_LABELS[change], partitions);
    this.held.add(undefined, change === 'acquired' ? partitions : -partitions);
  }

  clockOffset(ms: number, rttMs: number): void {
    this.offset.add(ms, rttMs);
  }

  gapsBridged(count: number): void {
    if (count > 0) this.bridged.inc(undefined, count);
  }

  private failureLabelsOf(code: string): MetricLabels {
    let labels = this.failureLabels.get(code);
    if (!labels) {
      labels = { broker: this.brokerLabels['broker']!, code };
      this.failureLabels.set(code, labels);
    }
    return labels;
  }
}

const REASON_LABELS: Record<FailureReason, MetricLabels> = {
  retryable: { reason: 'retryable' },
  throttled: { reason: 'throttled' },
  publisher_error: { reason: 'publisher_error' },
  permanent: { reason: 'permanent' },
  max_attempts: { reason: 'max_attempts' },
  sequence_repeat: { reason: 'sequence_repeat' },
};

const CHANGE_LABELS: Record<LeaseChange, MetricLabels> = {
  acquired: { change: 'acquired' },
  lost: { change: 'lost' },
  released: { change: 'released' },
};

/**
 * The relay↔database clock offset: of the last few readings, the one with the shortest round
 * trip (a reading's error is at most half its round trip; one that waited for a pool connection
 * or a busy server is worse).
 */
export class ClockOffset {
  private readonly readings: { ms: number; rttMs: number }[] = [];
  /** Database clock minus relay clock, ms (0 before the first reading). */
  ms = 0;

  constructor(private readonly keep = 8) {}

  add(ms: number, rttMs: number): void {
    this.readings.push({ ms, rttMs });
    if (this.readings.length > this.keep) this.readings.shift();
    let best = this.readings[0]!;
    for (const r of this.readings) if (r.rttMs < best.rttMs) best = r;
    this.ms = best.ms;
  }
}
