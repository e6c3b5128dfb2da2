import { hostname } from 'node:os';
import type { Pool } from 'pg';
import type { Logger } from '../logger.js';
import { NOOP_RELAY_METRICS, type RelayMetrics } from '../metrics/relay-metrics.js';
import { withSchema } from '../schema/identifiers.js';
import {
  ACQUIRE_ALL_SQL,
  ACQUIRE_SQL,
  HEARTBEAT_KIND_SQL,
  HEARTBEAT_SQL,
  LIVE_POLL_RELAYS_SQL,
  LIVE_RELAYS_SQL,
  OTHER_HOLDERS_KIND_SQL,
  OTHER_HOLDERS_SQL,
  RELEASE_SQL,
  RENEW_SQL,
  SET_SLEEPING_SQL,
  UNREGISTER_SQL,
} from './lease-sql.js';

interface Statements {
  readonly heartbeat: string;
  readonly heartbeatKind: string;
  readonly live: string;
  readonly livePoll: string;
  readonly renew: string;
  readonly release: string;
  readonly acquire: string;
  readonly unregister: string;
  readonly sleeping: string;
  readonly acquireAll: string;
  readonly otherHolders: string;
  readonly otherHoldersKind: string;
}

export interface PartitionLeaseOptions {
  /**
   * All or nothing (the CDC relay, which streams every partition's events from one slot): the
   * relay holds every partition or none, and takes them only when no other live relay holds any.
   */
  readonly exclusive?: boolean;
}

/** How often the same "why I got no partitions" explanation is repeated while it holds. */
const STANDBY_REPEAT_MS = 60_000;
/** How often a CDC relay locked out by polling relays (a setup mistake) says so again. */
const SHARED_REPEAT_MS = 30_000;

/** The fair share of `partitions` for the relay at `rank` among `relays` live relays. */
export function fairShare(partitions: number, relays: number, rank: number): number {
  if (relays <= 0 || rank < 0) return partitions;
  const base = Math.floor(partitions / relays);
  return base + (rank < partitions % relays ? 1 : 0);
}

/**
 * The partitions this relay holds, with the epoch it holds each under. Renewal (heartbeat, leases
 * extended) and the rebalance (fair share: acquire, retire) run in the background of the relay
 * loop ({@link LeaseKeeper}), each one at a time and each on its own chain, so a slow rebalance
 * never holds a renewal up. A lease change shows in the next claim's {@link snapshot}: an acquired
 * partition at once; a lost one is gone from it at once; a partition beyond the fair share is
 * retired (no new claims) and given back only by {@link releaseRetiring}, which the source calls
 * with nothing in flight, so a partition is never given away with work in flight.
 */
export class PartitionLeases {
  private readonly owned = new Map<number, string>();
  /** Held, beyond the fair share: renewed, never claimed from, released once nothing is in flight. */
  private readonly retired = new Map<number, string>();
  private readonly sql: Statements;
  /** Renewals (and what must not overlap them: the final release). */
  private renewChain: Promise<unknown> = Promise.resolve();
  /** Rebalances and releases. */
  private balanceChain: Promise<unknown> = Promise.resolve();
  /** The sleeping flag's writes, in the order they were asked for. */
  private flagChain: Promise<unknown> = Promise.resolve();
  private registered = false;
  /** Raised on every acquire: the idle cadence re-asserts its sleeping flag only when it moved. */
  acquisitions = 0;
  /** Called when partitions were acquired or retired (the runtime rings the loop's doorbell). */
  changed: () => void = () => undefined;
  readonly exclusive: boolean;
  /** The last standby explanation logged, and when: repeated at most every STANDBY_REPEAT_MS. */
  private standbyNote: { key: string; at: number } | undefined;
  /** The schema has no relays.kind (before migration 11): every relay counts as a polling one. */
  private noKind = false;

  constructor(
    private readonly pool: Pool,
    quotedSchema: string,
    readonly relayId: string,
    private readonly leaseMs: number,
    private readonly totalPartitions: () => Promise<number>,
    private readonly logger: Logger,
    private readonly metrics: RelayMetrics = NOOP_RELAY_METRICS,
    options: PartitionLeaseOptions = {},
  ) {
    this.exclusive = options.exclusive === true;
    this.sql = {
      heartbeat: withSchema(HEARTBEAT_SQL, quotedSchema),
      heartbeatKind: withSchema(HEARTBEAT_KIND_SQL, quotedSchema),
      live: withSchema(LIVE_RELAYS_SQL, quotedSchema),
      livePoll: withSchema(LIVE_POLL_RELAYS_SQL, quotedSchema),
      renew: withSchema(RENEW_SQL, quotedSchema),
      release: withSchema(RELEASE_SQL, quotedSchema),
      acquire: withSchema(ACQUIRE_SQL, quotedSchema),
      unregister: withSchema(UNREGISTER_SQL, quotedSchema),
      sleeping: withSchema(SET_SLEEPING_SQL, quotedSchema),
      acquireAll: withSchema(ACQUIRE_ALL_SQL, quotedSchema),
      otherHolders: withSchema(OTHER_HOLDERS_SQL, quotedSchema),
      otherHoldersKind: withSchema(OTHER_HOLDERS_KIND_SQL, quotedSchema),
    };
  }

  /** Partitions and epochs, as two parallel arrays for the SQL. */
  snapshot(): { partitions: number[]; epochs: string[] } {
    // In partition order: every statement locks partition rows in that order (no deadlocks).
    const entries = [...this.owned.entries()].sort((a, b) => a[0] - b[0]);
    return { partitions: entries.map((e) => e[0]), epochs: entries.map((e) => e[1]) };
  }

  get size(): number {
    return this.owned.size;
  }

  /** Partitions beyond the fair share wait for {@link releaseRetiring} (no new claims from them). */
  get retiring(): boolean {
    return this.retired.size > 0;
  }

  private serial<T>(chain: 'renewChain' | 'balanceChain', fn: () => Promise<T>): Promise<T> {
    const next = this[chain].then(fn, fn);
    this[chain] = next.catch(() => undefined);
    return next;
  }

  /** Heartbeat and extend every lease still held (retired ones too); forgets the ones taken over. */
  renew(): Promise<void> {
    return this.serial('renewChain', async () => {
      await this.heartbeat();
      if (this.owned.size === 0 && this.retired.size === 0) return;
      const entries = [...this.owned.entries(), ...this.retired.entries()].sort((a, b) => a[0] - b[0]);
      const partitions = entries.map((e) => e[0]);
      const epochs = entries.map((e) => e[1]);
      const { rows } = await this.pool.query<{ partition: number; epoch: string }>(this.sql.renew, [
        this.relayId,
        partitions,
        epochs,
        this.leaseMs,
      ]);
      const kept = new Set(rows.map((r) => r.partition));
      let lost = 0;
      for (let i = 0; i < partitions.length; i++) {
        const p = partitions[i]!;
        if (kept.has(p)) continue;
        // Still held under the epoch renewed (not acquired again meanwhile): lost.
        const map =
          this.owned.get(p) === epochs[i]
            ? this.owned
            : this.retired.get(p) === epochs[i]
              ? this.retired
              : undefined;
        if (map === undefined) continue;
        map.delete(p);
        lost += 1;
        this.logger.warn({ relayId: this.relayId, partition: p }, 'partition lease lost to another relay');
      }
      this.metrics.leases('lost', lost);
    });
  }

  /**
   * Takes this relay's fair share: releases extras, acquires free or expired partitions.
   * Resolves to true when the relay holds less than its share (some are still leased by others).
   */
  rebalance(): Promise<boolean> {
    if (this.exclusive) return this.serial('balanceChain', () => this.rebalanceExclusive());
    return this.serial('balanceChain', async () => {
      // Renewal heartbeats; the first rebalance may come before it (this relay counts itself).
      if (!this.registered) await this.heartbeat();
      // Partitions retired, not yet released: nothing to change until they are.
      if (this.retired.size > 0) return false;
      const rows = await this.livePollRelays();
      const ids = rows.map((r) => r.relay_id);
      const total = await this.totalPartitions();
      const share = fairShare(total, ids.length, ids.indexOf(this.relayId));
      if (this.owned.size > share) {
        // No new claims from the extra ones; the source releases them with nothing in flight.
        const extra = [...this.owned.entries()].sort((a, b) => b[0] - a[0]).slice(0, this.owned.size - share);
        for (const [p, epoch] of extra) {
          this.owned.delete(p);
          this.retired.set(p, epoch);
        }
        this.logger.info({ relayId: this.relayId, retiring: extra.map((e) => e[0]) }, 'releasing partitions');
        this.changed();
        return false;
      }
      if (this.owned.size < share) {
        const got = await this.pool.query<{ partition: number; epoch: string }>(this.sql.acquire, [
          this.relayId,
          share - this.owned.size,
          this.leaseMs,
        ]);
        for (const r of got.rows) this.owned.set(r.partition, r.epoch);
        this.metrics.leases('acquired', got.rows.length);
        if (got.rows.length > 0) {
          this.acquisitions += 1;
          this.logger.info(
            { relayId: this.relayId, acquired: got.rows.map((r) => r.partition) },
            'acquired partitions',
          );
          this.changed();
        }
      }
      return this.owned.size < share;
    });
  }

  /**
   * Gives back the partitions retired by the rebalance; the caller has nothing in flight from
   * them (claims left them out since they were retired). Never rejects: a failure is logged, and
   * their leases expire on their own.
   */
  releaseRetiring(): Promise<void> {
    const entries = [...this.retired.entries()].sort((a, b) => a[0] - b[0]);
    this.retired.clear();
    if (entries.length === 0) return Promise.resolve();
    const partitions = entries.map((e) => e[0]);
    return this.serial('balanceChain', async () => {
      this.metrics.leases('released', partitions.length);
      await this.pool.query(this.sql.release, [this.relayId, partitions, entries.map((e) => e[1])]);
      this.logger.info({ relayId: this.relayId, released: partitions }, 'released partitions');
    }).catch((error: unknown) => {
      this.logger.warn(
        { err: error, relayId: this.relayId, partitions },
        'could not release partitions; their leases expire on their own',
      );
    });
  }

  /**
   * Exclusive mode: keeps every partition, or takes them all when no other live relay holds any.
   * Holding some but not all (a polling relay shares the schema, or a pause lost some to another
   * CDC relay) is never kept: they are released. Resolves to true while the relay is a standby.
   */
  private async rebalanceExclusive(): Promise<boolean> {
    if (!this.registered) await this.heartbeat();
    const total = await this.totalPartitions();
    if (this.owned.size === total) return false;
    if (this.owned.size > 0) {
      const { partitions, epochs } = this.snapshot();
      await this.pool.query(this.sql.release, [this.relayId, partitions, epochs]);
      this.owned.clear();
      this.metrics.leases('released', partitions.length);
      this.logger.warn(
        { relayId: this.relayId, released: partitions, total },
        'held only some partitions in exclusive (CDC) mode: released them. Another relay holds the rest: ' +
          'CDC and polling relays must not share a schema',
      );
    }
    const got = await this.pool.query<{ partition: number; epoch: string }>(this.sql.acquireAll, [
      this.relayId,
      this.leaseMs,
    ]);
    for (const r of got.rows) this.owned.set(r.partition, r.epoch);
    this.metrics.leases('acquired', got.rows.length);
    if (got.rows.length > 0) {
      this.acquisitions += 1;
      this.standbyNote = undefined;
      this.logger.info(
        { relayId: this.relayId, partitions: got.rows.length },
        'acquired every partition (exclusive)',
      );
      return this.owned.size < total;
    }
    await this.explainStandby(total);
    return true;
  }

  /** Why an exclusive acquire got nothing: another CDC relay (all partitions), or a polling relay (some). */
  private async explainStandby(total: number): Promise<void> {
    const rows = await this.otherHolders();
    const holders = Object.fromEntries(rows.map((r) => [r.owner, r.partitions]));
    // A polling relay holds some (or all); before migration 11, guessed: not one relay with all.
    const shared =
      rows.some((r) => r.polling === true) ||
      (rows.every((r) => r.polling === undefined) && !(rows.length === 1 && rows[0]!.partitions === total));
    const sharedCase = shared && rows.length > 0;
    // Locked out by polling relays: one key whatever they hold (their counts move while they rebalance).
    const key = sharedCase ? 'shared' : JSON.stringify(holders);
    const repeatMs = sharedCase ? SHARED_REPEAT_MS : STANDBY_REPEAT_MS;
    const now = performance.now();
    if (this.standbyNote?.key === key && now - this.standbyNote.at < repeatMs) return;
    const reminder = this.standbyNote?.key === key;
    this.standbyNote = { key, at: now };
    if (sharedCase) {
      this.logger.error(
        { relayId: this.relayId, holders, total, reminder },
        'standby, not streaming: other relays hold some partitions (polling relays?) and a CDC relay needs ' +
          'every partition. CDC and polling relays must not share a schema: stop the polling relays, or ' +
          'this CDC relay',
      );
    } else {
      this.logger.info(
        { relayId: this.relayId, holders, total },
        'standby: another relay holds every partition',
      );
    }
  }

  /**
   * Renews, then says whether this relay still holds every partition (exclusive mode: what the
   * CDC relay checks right before it takes the slot over).
   */
  async verifyAll(): Promise<boolean> {
    await this.renew();
    return this.owned.size > 0 && this.owned.size === (await this.totalPartitions());
  }

  /** Gives every partition back (graceful stop) and leaves the relay list. */
  releaseAll(): Promise<void> {
    // After the rebalance and the renewal under way, and the last sleeping flag write.
    return this.serial('balanceChain', () =>
      this.serial('renewChain', async () => {
        await this.flagChain;
        for (const [p, epoch] of this.retired) this.owned.set(p, epoch);
        this.retired.clear();
        const { partitions, epochs } = this.snapshot();
        this.owned.clear();
        this.metrics.leases('released', partitions.length);
        if (partitions.length > 0)
          await this.pool.query(this.sql.release, [this.relayId, partitions, epochs]);
        if (this.registered) await this.pool.query(this.sql.unregister, [this.relayId]);
        this.registered = false;
      }),
    );
  }

  /**
   * Marks the held partitions as sleeping (producers then NOTIFY) or awake. Writes land in the
   * order they were asked for (each waits for the one before), so a late "awake" never
   * overwrites a later "sleeping".
   */
  setSleeping(sleeping: boolean): Promise<void> {
    const next = this.flagChain.then(async () => {
      const { partitions, epochs } = this.snapshot();
      if (partitions.length === 0) return;
      await this.pool.query(this.sql.sleeping, [this.relayId, partitions, epochs, sleeping]);
    });
    this.flagChain = next.catch(() => undefined);
    return next;
  }

  /** Forget everything without touching the database (the leases expire on their own). */
  forget(): void {
    this.metrics.leases('lost', this.owned.size + this.retired.size);
    this.owned.clear();
    this.retired.clear();
  }

  private async otherHolders(): Promise<{ owner: string; partitions: number; polling?: boolean }[]> {
    if (!this.noKind) {
      try {
        return (await this.pool.query(this.sql.otherHoldersKind, [this.relayId])).rows;
      } catch (error) {
        if (!isUndefinedColumn(error)) throw error;
        this.noKind = true;
      }
    }
    return (await this.pool.query(this.sql.otherHolders, [this.relayId])).rows;
  }

  /** The live relays the fair share divides among: polling ones only (all of them before migration 11). */
  private async livePollRelays(): Promise<{ relay_id: string }[]> {
    if (!this.noKind) {
      try {
        return (await this.pool.query<{ relay_id: string }>(this.sql.livePoll)).rows;
      } catch (error) {
        if (!isUndefinedColumn(error)) throw error;
        this.noKind = true;
      }
    }
    return (await this.pool.query<{ relay_id: string }>(this.sql.live)).rows;
  }

  private async heartbeat(): Promise<void> {
    const sent = Date.now();
    const params = [this.relayId, hostname(), process.pid, this.leaseMs];
    let result: { rows: { db_ms: string }[] } | undefined;
    if (this.exclusive && !this.noKind) {
      try {
        result = await this.pool.query<{ db_ms: string }>(this.sql.heartbeatKind, [...params, 'cdc']);
      } catch (error) {
        if (!isUndefinedColumn(error)) throw error;
        this.noKind = true;
      }
    }
    const { rows } = result ?? (await this.pool.query<{ db_ms: string }>(this.sql.heartbeat, params));
    // The database read its clock about halfway through the round trip.
    const received = Date.now();
    const dbMs = Number(rows[0]?.db_ms);
    if (Number.isFinite(dbMs)) this.metrics.clockOffset(dbMs - (sent + received) / 2, received - sent);
    this.registered = true;
  }
}

/** 42703: relays.kind is missing (a schema before migration 11). */
function isUndefinedColumn(error: unknown): boolean {
  return (error as { code?: unknown }).code === '42703';
}
