import { type FailureOutcome, NOOP_RELAY_METRICS, type RelayMetrics } from '../metrics/relay-metrics.js';
import { BrokerContact } from './health.js';

export interface RelayStats {
  /** Events acknowledged by the broker and removed from the outbox. */
  published: number;
  /** Failed attempts rescheduled with backoff. */
  retried: number;
  /** Events that went dead (max attempts, permanent error, or a repeated sequence). */
  dead: number;
  /** Aggregates published across a gap in their sequences (docs/guarantees.md, Caller versions). */
  gapsBridged: number;
  /** Publishes refused because the broker was unreachable (no attempt charged). */
  unavailable: number;
  batches: number;
  /** Partitions this relay holds now. */
  partitions: number[];
  /** Last loop error (database or publisher), if any. */
  lastError: string | undefined;
  /** Time spent per batch in each step, in ms: mean and max since start. */
  timings: { claim: Timing; publish: Timing; record: Timing };
}

export interface Timing {
  mean: number;
  max: number;
  /** Median and 99th percentile since start, ms (from log-spaced buckets: within 5 %). */
  p50: number;
  p99: number;
}

/** Bucket i holds times up to BUCKET_BASE_MS × BUCKET_GROWTH^i: 1 µs … about 50 min in 450 buckets. */
const BUCKET_BASE_MS = 0.001;
const BUCKET_GROWTH = 1.05;
const BUCKETS = 450;
const LOG_GROWTH = Math.log(BUCKET_GROWTH);

function bucketOf(ms: number): number {
  if (ms <= BUCKET_BASE_MS) return 0;
  return Math.min(BUCKETS - 1, Math.ceil(Math.log(ms / BUCKET_BASE_MS) / LOG_GROWTH));
}

const REPEAT_DEAD: FailureOutcome = Object.freeze({ status: 'dead', reason: 'sequence_repeat' });

/** Mean, max and quantiles of the times added; each time also goes to `observe` (a histogram). */
export class Stopwatch {
  private total = 0;
  private count = 0;
  private max = 0;
  private readonly buckets = new Uint32Array(BUCKETS);

  constructor(private readonly observe: (ms: number) => void = () => {}) {}

  add(ms: number): void {
    this.observe(ms);
    this.total += ms;
    this.count += 1;
    if (ms > this.max) this.max = ms;
    this.buckets[bucketOf(ms)]! += 1;
  }

  get(): Timing {
    return {
      mean: this.count === 0 ? 0 : this.total / this.count,
      max: this.max,
      p50: this.quantile(0.5),
      p99: this.quantile(0.99),
    };
  }

  /** The upper bound of the bucket holding the q-th time (never above the max seen). */
  private quantile(q: number): number {
    if (this.count === 0) return 0;
    const rank = Math.ceil(q * this.count);
    let seen = 0;
    for (let i = 0; i < BUCKETS; i++) {
      seen += this.buckets[i]!;
      if (seen >= rank) return Math.min(this.max, BUCKET_BASE_MS * BUCKET_GROWTH ** i);
    }
    return this.max;
  }
}

/** What a relay counts while it runs; {@link snapshot} is its `stats()`. */
export class RelayCounters {
  /** The counts, as they go into `stats()` and the "relay stopped" log line. */
  readonly counts = { published: 0, retried: 0, dead: 0, gapsBridged: 0, unavailable: 0, batches: 0 };
  /** Time per batch in each step: the claim statement, the publish calls, the outcome statement. */
  readonly watches: { readonly claim: Stopwatch; readonly publish: Stopwatch; readonly record: Stopwatch };
  /** The last loop error (database or publisher), redacted. */
  lastError: string | undefined;
  /** Whether the broker answered a publish yet, for the readiness check. */
  readonly broker = new BrokerContact();

  /** `metrics` gets every count and time as well (no-op by default). */
  constructor(readonly metrics: RelayMetrics = NOOP_RELAY_METRICS) {
    this.watches = {
      claim: new Stopwatch((ms) => metrics.claimMs(ms)),
      publish: new Stopwatch((ms) => metrics.publishMs(ms)),
      record: new Stopwatch((ms) => metrics.recordMs(ms)),
    };
  }

  /** One batch's outcome recorded: `published` of its events left the outbox, `failures` were rescheduled or dead. */
  recorded(published: number, failures: readonly FailureOutcome[]): void {
    this.metrics.recorded(published, failures);
    const counts = this.counts;
    counts.batches += 1;
    counts.published += published;
    for (const f of failures) {
      if (f.status === 'dead') counts.dead += 1;
      else counts.retried += 1;
    }
  }

  /** Events marked dead because their sequence repeats one already delivered (no batch recorded). */
  repeatsDead(count: number): void {
    if (count === 0) return;
    this.metrics.recorded(
      0,
      Array.from({ length: count }, () => REPEAT_DEAD),
    );
    this.counts.dead += count;
  }

  /** Gaps bridged. */
  gapsBridged(count: number): void {
    this.metrics.gapsBridged(count);
    this.counts.gapsBridged += count;
  }

  snapshot(partitions: number[]): RelayStats {
    return {
      ...this.counts,
      partitions,
      lastError: this.lastError,
      timings: {
        claim: this.watches.claim.get(),
        publish: this.watches.publish.get(),
        record: this.watches.record.get(),
      },
    };
  }
}
