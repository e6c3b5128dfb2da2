import { HANDLER_SECONDS, LATENCY_SECONDS } from './buckets.js';
import type { CounterMetric, HistogramMetric, MetricLabels, MetricsSink } from './sink.js';

/** What the lag is read from: a message's headers (its `ce-time`); an `InboxMessage` is one. */
export interface HeadersOf {
  readonly headers: Readonly<Record<string, string>>;
}

/** What the inbox records. The no-op version reads no clock and builds no labels. */
export interface InboxMetrics {
  /** A start time for {@link handlerDone} (0 without metrics: no clock read). */
  handlerStarted(): number;
  handlerDone(started: number): void;
  /** What `handle` answered (`outcome` label); a processed message's lag from its `ce-time`. */
  handled(outcome: string, message: HeadersOf): void;
}

const nothing = (): void => {};

export const NOOP_INBOX_METRICS: InboxMetrics = Object.freeze({
  handlerStarted: () => 0,
  handlerDone: nothing,
  handled: nothing,
});

/** The inbox's metric names and help texts (the shared contract). */
export const INBOX_METRICS = {
  messages: [
    'tx_outbox_inbox_messages_total',
    'Messages the inbox handled, by outcome (processed, duplicate, stale, deferred, quarantined, skipped).',
  ],
  handler: ['tx_outbox_inbox_handler_duration_seconds', "The handler's run (inside the inbox transaction)."],
  lag: [
    'tx_outbox_inbox_lag_seconds',
    'Event created (ce-time, producer database clock) to applied by this consumer (consumer clock).',
  ],
} as const;

/** The outcomes whose series exist from the start (a rate over them works before the first message). */
const OUTCOMES = ['processed', 'duplicate', 'stale', 'deferred', 'quarantined', 'skipped'] as const;

/** The inbox's metrics on a sink whose constant label is `consumer`. */
/** Lags beyond a year are not observed (see {@link SinkInboxMetrics.handled}). */
export const MAX_PLAUSIBLE_LAG_SECONDS = 365 * 86_400;

export class SinkInboxMetrics implements InboxMetrics {
  private readonly messages: CounterMetric;
  private readonly handler: HistogramMetric;
  private readonly lag: HistogramMetric;
  private readonly outcomeLabels = new Map<string, MetricLabels>();

  constructor(sink: MetricsSink) {
    const m = INBOX_METRICS;
    this.messages = sink.counter(...m.messages, ['outcome']);
    this.handler = sink.histogram(...m.handler, [], HANDLER_SECONDS);
    this.lag = sink.histogram(...m.lag, [], LATENCY_SECONDS);
    for (const o of OUTCOMES) this.messages.inc(this.labelsOf(o), 0);
  }

  handlerStarted(): number {
    return performance.now();
  }

  handlerDone(started: number): void {
    this.handler.observe(undefined, (performance.now() - started) / 1000);
  }

  handled(outcome: string, message: HeadersOf): void {
    this.messages.inc(this.labelsOf(outcome));
    if (outcome !== 'processed') return;
    const time = message.headers['ce-time'];
    const created = time === undefined ? Number.NaN : Date.parse(time);
    if (!Number.isFinite(created)) return;
    const seconds = (Date.now() - created) / 1000;
    // A time no real lag explains (a sender's clock at 1970, a forged header) would swamp the
    // histogram's sum for good: left out. Within a minute ahead is clock skew, counted as 0.
    if (seconds > MAX_PLAUSIBLE_LAG_SECONDS || seconds < -60) return;
    this.lag.observe(undefined, Math.max(0, seconds));
  }

  private labelsOf(outcome: string): MetricLabels {
    let labels = this.outcomeLabels.get(outcome);
    if (!labels) {
      labels = { outcome };
      this.outcomeLabels.set(outcome, labels);
    }
    return labels;
  }
}
