/** Histogram buckets, in base units. */

/** Claim / publish / record step of one batch: 0.5 ms to 10 s. */
export const STEP_SECONDS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** Commit to broker ack, event created to applied: 1 ms to 1 h (a backlog or an outage lasts). */
export const LATENCY_SECONDS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
];

/** Events per claimed batch (batchSize is at most 10,000). */
export const BATCH_EVENTS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000];

/** An inbox handler's run: 0.5 ms to 60 s. */
export const HANDLER_SECONDS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
];
