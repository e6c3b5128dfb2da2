import { wakeChannel } from '../../producer/enqueue-sql.js';
import type { Claimed } from '../claim/claim.js';
import { CLAIM_SQL } from '../claim/claim-sql.js';
import { TableReader } from '../claim/table-reader.js';
import type { ReleaseStack } from '../release-stack.js';
import type { RuntimeContext, RuntimeSource } from '../runtime.js';
import type { Verdict } from '../verdicts.js';
import { WakeListener } from '../wakeup.js';
import { IdleCadence } from './idle.js';
import { ScanFloor } from './scan-floor.js';

/** Why the last `next()` found nothing: what {@link PollingSource.idle} waits for. */
type Idle = 'no-partitions' | 'recording' | 'held' | 'nothing';

/**
 * The polling source: claims from the events table of the partitions this relay leases
 * (a fair share, kept by the runtime in the background: a claim takes the leases as they are
 * now; partitions retired by a rebalance are released here, between batches, with nothing in
 * flight), three stages in a pipeline (claim k+1 while k publishes and k-1's outcome is
 * recorded), the idle cadence when a claim finds nothing.
 */
export class PollingSource implements RuntimeSource<Claimed> {
  readonly #c: RuntimeContext;
  readonly #reader: TableReader;
  readonly #floor: ScanFloor;
  readonly #idle: IdleCadence;
  #why: Idle = 'nothing';

  constructor(c: RuntimeContext) {
    const o = c.o;
    this.#c = c;
    this.#floor = new ScanFloor({ fullEveryMs: o.pollIntervalMs });
    this.#idle = new IdleCadence(c.loop.bell, c.leases, o.listen, o.pollIntervalMs);
    this.#reader = new TableReader({
      o,
      counters: c.counters,
      leases: c.leases,
      refused: c.loop.refused,
      claim: ['claim', CLAIM_SQL],
      floor: this.#floor,
    });
  }

  background(tasks: ReleaseStack): void {
    const o = this.#c.o;
    if (!o.listen) return;
    const listener = new WakeListener(
      o.pool,
      wakeChannel(o.schema),
      () => this.#c.loop.bell.wake(),
      o.logger,
    );
    listener.start();
    tasks.push(() => listener.stop());
  }

  async next(): Promise<Claimed | undefined> {
    const { leases, loop, o } = this.#c;
    const pipeline = this.#reader.pipeline;
    if (!pipeline.prefetched) {
      // Partitions beyond the fair share are given back once nothing claimed from them is in
      // flight (claims leave them out already); the release runs in the background.
      if (leases.retiring) {
        await pipeline.drain();
        void leases.releaseRetiring();
      }
      if (leases.size === 0) {
        await pipeline.drain();
        this.#why = 'no-partitions';
        return undefined;
      }
    }
    const claimed = await pipeline.next();
    if (claimed.messages.length === 0) {
      // Events held back behind the batch being recorded become claimable once it lands; when
      // only held-back aggregates came back, they are excluded now: look again at once.
      this.#why = pipeline.recording ? 'recording' : claimed.scanned > 0 ? 'held' : 'nothing';
      return undefined;
    }
    this.#idle.awake();
    // No prefetch while partitions wait to be released: the next claim comes after the drain.
    return this.#reader.claimed(claimed, !loop.halted && !leases.retiring && claimed.scanned === o.batchSize);
  }

  async idle(): Promise<void> {
    const pipeline = this.#reader.pipeline;
    switch (this.#why) {
      case 'no-partitions':
        // The keeper rings the doorbell when it acquires some.
        return this.#c.loop.bell.sleep(this.#c.o.pollIntervalMs);
      case 'recording':
        return pipeline.drain();
      case 'held':
        return;
      case 'nothing':
        return this.#idle.rest();
    }
  }

  settle(_batch: Claimed, verdict: Verdict): Promise<void> {
    return this.#reader.pipeline.record(verdict);
  }

  drain(): Promise<void> {
    return this.#reader.pipeline.drain();
  }

  /** After a loop error: new connections, a lease round at once, and the runtime's backoff. */
  async reset(error: unknown, failures: number, backoff: () => number): Promise<number> {
    await this.#reader.reset();
    this.#floor.reset();
    if (failures === 0) return 0;
    await this.#reader.releaseSessions(error);
    const backoffMs = backoff();
    this.#c.o.logger.error(
      { err: error, relayId: this.#c.o.relayId, retryInMs: backoffMs },
      'relay loop error; backing off',
    );
    this.#c.keeper.asap();
    return backoffMs;
  }

  stopped(): Promise<void> {
    return this.#reader.stopped(this.#c.o.logger, this.#c.o.relayId, 'outcome');
  }

  close(timeoutMs: number): Promise<void> {
    return this.#reader.close(timeoutMs);
  }
}
