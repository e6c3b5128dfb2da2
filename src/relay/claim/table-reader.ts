import type { Logger } from '../../logger.js';
import type { PartitionLeases } from '../leases.js';
import type { ResolvedRelayOptions } from '../options.js';
import type { RefusedAggregates } from '../outage.js';
import { outcomeStatement, RECORD_CHAINED_DELIVERED_SQL } from '../outcome-sql.js';
import { Recorder } from '../record.js';
import { RelaySession, relaySessionSettings, relayStatement } from '../session.js';
import type { RelayCounters } from '../stats.js';
import { type Claimed, Claimer, type ClaimerParts } from './claim.js';
import { GapWatch } from './gap-watch.js';
import { HoldBack } from './hold-back.js';
import { Pipeline } from './pipeline.js';
import { SequenceFaults } from './sequence-faults.js';
import { BRIDGE_GAPS_SQL, REPEAT_DEAD_SQL } from './sequence-faults-sql.js';

export interface TableReaderParts {
  readonly o: ResolvedRelayOptions;
  readonly counters: RelayCounters;
  readonly leases: Pick<PartitionLeases, 'snapshot'>;
  readonly refused: RefusedAggregates;
  /** The claim statement's name and text. */
  readonly claim: readonly [name: string, sql: string];
  /** The gap bridge's name and text; default `bridge_gaps`, BRIDGE_GAPS_SQL (the CDC hand-over source has its own). */
  readonly bridgeGaps?: readonly [name: string, sql: string];
  /** Prefix of the connections' names (`cdc-poll-` gives `cdc-poll-claim`); none: `claim`. */
  readonly sessionPrefix?: string;
  readonly floor?: ClaimerParts['floor'];
  readonly scope?: ClaimerParts['scope'];
}

/**
 * Reading the events table in order, for the sources that claim rows (the polling source and
 * the CDC hand-over source): the claim and its ordering gate, the hold-back, the sequence
 * faults probed in the background, the outcome statement, as one {@link Pipeline}; on
 * connections of their own.
 */
export class TableReader {
  readonly pipeline: Pipeline;
  readonly #claimSession: RelaySession;
  readonly #recordSession: RelaySession;
  readonly #faults: SequenceFaults;

  constructor(p: TableReaderParts) {
    const o = p.o;
    const settings = relaySessionSettings(o.synchronousCommit);
    const prefix = p.sessionPrefix ?? '';
    this.#claimSession = new RelaySession(o.pool, settings, o.logger, `${prefix}claim`);
    this.#recordSession = new RelaySession(o.pool, settings, o.logger, `${prefix}outcome`);
    const holdBack = new HoldBack(o.pollIntervalMs, o.logger, o.relayId);
    this.#faults = new SequenceFaults({
      relayId: o.relayId,
      logger: o.logger,
      counters: p.counters,
      // Held heads are seen again every poll interval (the hold-back's length): forget one
      // only when several intervals passed without it.
      watch: new GapWatch({ graceMs: o.gapGraceMs, forgetMs: Math.max(60_000, 5 * o.pollIntervalMs) }),
      holdBack,
      repeatDead: relayStatement('repeat_dead', REPEAT_DEAD_SQL, o.schema, o.quotedSchema),
      bridgeGaps: relayStatement(
        ...(p.bridgeGaps ?? ['bridge_gaps', BRIDGE_GAPS_SQL]),
        o.schema,
        o.quotedSchema,
      ),
      probeSession: new RelaySession(o.pool, settings, o.logger, `${prefix}probe`),
    });
    const claimer = new Claimer({
      session: this.#claimSession,
      statement: relayStatement(p.claim[0], p.claim[1], o.schema, o.quotedSchema),
      relayId: o.relayId,
      batchSize: o.batchSize,
      leases: p.leases,
      holdBack,
      refused: p.refused,
      faults: this.#faults,
      watch: p.counters.watches.claim,
      ...(p.floor ? { floor: p.floor } : {}),
      ...(p.scope ? { scope: p.scope } : {}),
    });
    const recorder = new Recorder(
      this.#recordSession,
      relayStatement(...outcomeStatement(o.history), o.schema, o.quotedSchema),
      o.relayId,
      o.logger,
      p.counters,
      o.history ? [o.publisher.name] : [],
      o.history
        ? undefined
        : relayStatement('outcome_chained', RECORD_CHAINED_DELIVERED_SQL, o.schema, o.quotedSchema),
    );
    this.pipeline = new Pipeline(claimer, recorder, holdBack);
  }

  /**
   * A claim with events: in flight until its outcome is recorded; `prefetch` claims the next
   * batch while this one publishes (a full claim: there is likely more). The claim leaves out
   * this batch's ids and holds back their aggregates, so the two never overlap on one aggregate.
   */
  claimed(claimed: Claimed, prefetch: boolean): Claimed {
    this.pipeline.track(claimed);
    if (prefetch) this.pipeline.prefetch();
    return claimed;
  }

  /** The loop ended: the last outcome recorded if it can be (else said: its events come again). */
  async stopped(logger: Logger, relayId: string, what: string): Promise<void> {
    await this.pipeline.drain().catch((error: unknown) => {
      logger.warn({ err: error, relayId }, `last ${what} not recorded; its events will be republished`);
    });
    this.pipeline.reset();
  }

  /** After a loop error: nothing in flight any more (the pipeline drained first). */
  async reset(): Promise<void> {
    await this.pipeline.drain().catch(() => undefined);
    this.pipeline.reset();
  }

  /** New connections for the next attempt (`error`: the old ones are not reused). */
  async releaseSessions(error?: unknown): Promise<void> {
    await Promise.all([this.#claimSession.release(error), this.#recordSession.release(error)]);
  }

  /** The relay stops: the gap probe finished (up to `timeoutMs`), the connections given back. */
  async close(timeoutMs: number): Promise<void> {
    await this.#faults.stopped(timeoutMs);
    await this.releaseSessions();
  }
}
