import type { SourceBatch } from './batch.js';
import type { Verdict } from './verdicts.js';

export type { SourceBatch } from './batch.js';

/**
 * Where a relay's events come from: the seam between the runtime (the loop and the lifecycle,
 * src/relay/*.ts) and a source — the polling source (claims from the events table), the CDC
 * stream source (the replication stream) and the CDC hand-over source (the aggregates the
 * stream handed over). The loop runs `next → publish → judged → settle`, and the source
 * decides nothing about outages, backoff or the lifecycle: those are the runtime's, once.
 */
export interface RelaySource<B extends SourceBatch = SourceBatch> {
  /** The next batch to publish, read under the leases held; undefined: nothing now, {@link idle}. */
  next(): Promise<B | undefined>;
  /** Waits for work after `next()` found none (the source knows why: idle, standby, catching up). */
  idle(): Promise<void>;
  /** What the verdict means for what the source still holds (before the next `next()`). */
  judged?(batch: B, verdict: Verdict): void;
  /**
   * Settles a judged batch: the outcome statement for table rows, the hand-over and the
   * slot's confirmation for streamed events. May run while the next batch publishes; waits
   * for the previous settle first (one at a time, in order).
   */
  settle(batch: B, verdict: Verdict): Promise<void>;
  /** Waits for the settle under way (before an outage wait, a rebalance, an idle sleep). */
  drain(): Promise<void>;
  /**
   * After the loop threw: forget what is in flight, give back the connections. `failures` is
   * the errors in a row (0: the relay is stopping, clean up only). Logs the error and returns
   * how long the loop waits before the next attempt: `backoff()` is the runtime's error backoff.
   */
  reset(error: unknown, failures: number, backoff: () => number): Promise<number>;
  /** The loop ended (the relay stops): settle what is in flight if it can; never throws. */
  stopped(): Promise<void>;
  /** The relay stops, after its loop: background probes and connections given back. */
  close(timeoutMs: number): Promise<void>;
}
