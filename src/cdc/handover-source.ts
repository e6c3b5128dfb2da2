import { aggregateKey } from '../aggregate-key.js';
import type { Claimed } from '../relay/claim/claim.js';
import { TableReader } from '../relay/claim/table-reader.js';
import { type LoopParts, RelayLoop } from '../relay/loop.js';
import type { RelaySource } from '../relay/source.js';
import type { Verdict } from '../relay/verdicts.js';
import type { Handover } from './handover.js';
import { POLLED_BRIDGE_GAPS_SQL, POLLED_CLAIM_SQL } from './handover-sql.js';

export interface HandoverSourceParts extends LoopParts {
  readonly leases: { snapshot(): { partitions: number[]; epochs: string[] } };
  readonly handover: Handover;
  /** Table row ids the stream has in flight: left out of the claims. */
  readonly streamInFlight: () => readonly string[];
  /** Aggregates on their way into the table (a handover not committed yet): not released. */
  readonly handingOver: (key: string) => boolean;
}

/** How often the source looks for polled aggregates it can give back to the stream, ms. */
const RELEASE_EVERY_MS = 1000;

/** Why the last `next()` found nothing. */
type Idle = 'sleep' | 'recording' | 'again';

/**
 * The CDC relay's hand-over source (the polling path, P): claims like the polling source,
 * restricted to the aggregates the stream handed over ({@link Handover}) and without the ids the
 * stream has in flight, in a loop of its own woken on every handover, else every poll interval
 * (at most a second). Between batches, with nothing in flight, it gives the aggregates with
 * nothing left in the table back to the stream.
 */
export class HandoverSource implements RelaySource<Claimed> {
  readonly #p: HandoverSourceParts;
  readonly #loop: RelayLoop<Claimed>;
  readonly #reader: TableReader;
  #lastRelease = 0;
  #why: Idle = 'sleep';
  #ready: () => boolean = () => true;

  constructor(p: HandoverSourceParts) {
    this.#p = p;
    this.#loop = new RelayLoop<Claimed>(p);
    this.#reader = new TableReader({
      o: p.o,
      counters: p.counters,
      leases: p.leases,
      refused: this.#loop.refused,
      claim: ['cdc_claim', POLLED_CLAIM_SQL],
      bridgeGaps: ['cdc_bridge_gaps', POLLED_BRIDGE_GAPS_SQL],
      sessionPrefix: 'cdc-poll-',
      scope: () => ({ exclude: p.streamInFlight(), values: [p.handover.claimScopeJson()] }),
    });
  }

  /** Runs the loop (again, after {@link stop}); it claims nothing until `ready()`. */
  start(ready: () => boolean = () => true): void {
    if (this.#loop.running) return;
    this.#ready = ready;
    this.#loop.start(this);
  }

  /** Finishes the batch in flight and stops the loop. */
  stop(): Promise<void> {
    return this.#loop.stop();
  }

  /** A handover committed: claim now. */
  wake(): void {
    this.#loop.bell.wake();
  }

  async next(): Promise<Claimed | undefined> {
    const { o, handover } = this.#p;
    const pipeline = this.#reader.pipeline;
    if (performance.now() - this.#lastRelease >= RELEASE_EVERY_MS) {
      await pipeline.drain();
      this.#lastRelease = performance.now();
      await handover.release(o.pool, this.#p.handingOver);
    }
    if (handover.size === 0 || !this.#ready()) {
      this.#why = 'sleep';
      return undefined;
    }
    const claimed = await pipeline.next();
    if (claimed.messages.length === 0) {
      this.#why = pipeline.recording ? 'recording' : claimed.scanned === 0 ? 'sleep' : 'again';
      return undefined;
    }
    return this.#reader.claimed(claimed, !this.#loop.halted && claimed.scanned === o.batchSize);
  }

  async idle(): Promise<void> {
    if (this.#why === 'recording') return this.#reader.pipeline.drain();
    if (this.#why === 'sleep')
      return this.#loop.bell.sleep(Math.min(this.#p.o.pollIntervalMs, RELEASE_EVERY_MS));
  }

  judged(claimed: Claimed, verdict: Verdict): void {
    const byId = new Map(claimed.messages.map((m) => [m.id, m]));
    for (const id of verdict.delivered) {
      const m = byId.get(id);
      if (m) this.#p.handover.deliveredByPoll(aggregateKey(m), m.sequence);
    }
  }

  settle(_claimed: Claimed, verdict: Verdict): Promise<void> {
    return this.#reader.pipeline.record(verdict);
  }

  drain(): Promise<void> {
    return this.#reader.pipeline.drain();
  }

  async reset(error: unknown, failures: number, backoff: () => number): Promise<number> {
    await this.#reader.reset();
    if (failures === 0) return 0;
    await this.#reader.releaseSessions(error);
    const delay = backoff();
    this.#p.o.logger.error(
      { err: error, relayId: this.#p.o.relayId, retryInMs: delay },
      'CDC polling path error; backing off',
    );
    return delay;
  }

  stopped(): Promise<void> {
    return this.#reader.stopped(this.#p.o.logger, this.#p.o.relayId, 'polled outcome');
  }

  /** The relay stops: the loop ended, the gap probe finished, the connections given back. */
  async close(timeoutMs: number): Promise<void> {
    await this.stop();
    await this.#reader.close(timeoutMs);
  }
}
