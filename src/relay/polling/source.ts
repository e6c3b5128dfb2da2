import { wakeChannel } from '../../producer/enqueue-sql.js';
import type { Claimed } from '../claim/claim.js';
import { CLAIM_SQL } from '../claim/claim-sql.js';
import { TableReader } from '../claim/table-reader.js';
import type { ReleaseStack } from '../release-stack.js';
import type { RuntimeContext, RuntimeSource } from '../runtime.js';
import type { Verdict } from '../verdicts.js';
import { WakeListener } from '../wakeup.js';
import { IdleCadence } from './idle.js';
import { LeaseSchedule } from './lease-schedule.js';
import { ScanFloor } from './scan-floor.js';

/** Why the last `next()` found nothing: what {@link PollingSource.idle} waits for. */
type Idle = 'no-partitions' | 'recording' | 'held' | 'nothing';

/**
 * The polling source: claims from the events table of the partitions this relay leases
 * (a fair share, rebalanced between batches), three stages in a pipeline (claim k+1 while k
 * publishes and k-1's outcome is recorded), the idle cadence when a claim finds nothing.
 */
export class PollingSource implements RuntimeSource<Claimed> {
  readonly #c: RuntimeContext;
  readonly #reader: TableReader;
  readonly #schedule: LeaseSchedule;
  readonly #floor: ScanFloor;
  readonly #idle: IdleCadence;
  #why: Idle = 'nothing';

  constructor(c: RuntimeContext) {
    const o = c.o;
    this.#c = c;
    this.#schedule = new LeaseSchedule(o.leaseMs);
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
      // Takes this relay's fair share of partitions, with nothing in flight.
      if (this.#schedule.due) {
        await pipeline.drain();
        this.#schedule.rebalanced(await leases.rebalance());
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
    await this.#idle.awake();
    return this.#reader.claimed(
      claimed,
      !loop.halted && !this.#schedule.due && claimed.scanned === o.batchSize,
    );
  }

  async idle(): Promise<void> {
    const pipeline = this.#reader.pipeline;
    switch (this.#why) {
      case 'no-partitions':
        return this.#c.loop.bell.sleep(Math.min(this.#c.o.pollIntervalMs, this.#schedule.everyMs));
      case 'recording':
        return pipeline.drain();
      case 'held':
        return;
      case 'nothing':
        return this.#idle.rest(this.#schedule.untilDue());
    }
  }

  settle(_batch: Claimed, verdict: Verdict): Promise<void> {
    return this.#reader.pipeline.record(verdict);
  }

  drain(): Promise<void> {
    return this.#reader.pipeline.drain();
  }

  /** After a loop error: new connections, a rebalance first, and the runtime's backoff. */
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
    this.#schedule.asap();
    return backoffMs;
  }

  stopped(): Promise<void> {
    return this.#reader.stopped(this.#c.o.logger, this.#c.o.relayId, 'outcome');
  }

  close(timeoutMs: number): Promise<void> {
    return this.#reader.close(timeoutMs);
  }
}
