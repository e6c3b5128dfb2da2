/**
 * What a chaos run on the CDC relay adds: the slot as PostgreSQL reports it (read by the harness
 * on its own connection, never through a proxy), the streaming relay found from the relays' stats
 * lines, and the quiet period's check — producers paused, the heartbeat alone must move the slot.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import type { Supervisor } from './supervisor.js';

export const PRODUCER_MODES = ['table', 'wal', 'mixed'] as const;
export type ProducerMode = (typeof PRODUCER_MODES)[number];

/** How producer `index` (0-based) enqueues: mixed alternates table, WAL, table … */
export function producerVia(mode: ProducerMode, index: number): 'table' | 'wal' {
  if (mode === 'mixed') return index % 2 === 0 ? 'table' : 'wal';
  return mode;
}

export interface SlotSample {
  readonly at: number;
  /** confirmed_flush_lsn, restart_lsn and pg_current_wal_lsn() as numbers. */
  readonly confirmed: bigint;
  readonly restart: bigint;
  readonly current: bigint;
  readonly active: boolean;
}

/** The slot now (undefined: no such slot, or the server did not answer). */
export async function slotSample(db: pg.Pool, slot: string): Promise<SlotSample | undefined> {
  const { rows } = await db
    .query<{ confirmed: string | null; restart: string | null; current: string; active: boolean }>(
      `SELECT (confirmed_flush_lsn - '0/0')::text AS confirmed, (restart_lsn - '0/0')::text AS restart,
              (pg_current_wal_lsn() - '0/0')::text AS current, active
         FROM pg_replication_slots WHERE slot_name = $1`,
      [slot],
    )
    .catch(() => ({ rows: [] }));
  const r = rows[0];
  if (!r) return undefined;
  return {
    at: Date.now(),
    confirmed: BigInt(r.confirmed ?? 0),
    restart: BigInt(r.restart ?? 0),
    current: BigInt(r.current),
    active: r.active,
  };
}

/** The relay whose last stats line says it streams (undefined: none does now). */
export function streamingRelay(supervisor: Supervisor): string | undefined {
  return supervisor.byRole('relay').find((c) => c.latest()?.streaming === 1)?.name;
}

/** What one quiet period showed. */
export interface QuietCheck {
  /** Seconds until the slot had confirmed everything committed before the pause (bounded). */
  readonly settleS: number;
  readonly settled: boolean;
  /** The confirmed position moved during the quiet window, bytes. */
  readonly advancedBytes: number;
  /** How often the confirmed position moved during the window (the heartbeat's beats). */
  readonly advances: number;
  /** pg_current_wal_lsn() − confirmed_flush_lsn at the window's end, bytes. */
  readonly lagBytesAtEnd: number;
  /** pg_current_wal_lsn() − restart_lsn at the window's start and end, bytes. */
  readonly retainedBytesAtStart: number;
  readonly retainedBytesAtEnd: number;
  readonly ok: boolean;
  readonly problem?: string;
}

/** A quiet window's end: WAL the slot may leave unconfirmed (a few heartbeats and lease renewals). */
export const QUIET_MAX_LAG_BYTES = 1024 * 1024;
/** …and may retain: one WAL segment beyond what it retained when the window began. */
export const QUIET_MAX_RETAINED_GROWTH_BYTES = 16 * 1024 * 1024;
const SETTLE_TIMEOUT_MS = 90_000;

/**
 * Producers are paused (the caller's doing). Waits until the slot confirmed all the WAL written
 * before the pause (the in-flight events settled), then watches the slot for `windowMs` of an
 * otherwise idle database: its confirmed position must advance (the heartbeat) and it must end
 * the window near the WAL's end, retaining no more than it did at the start plus a segment.
 */
export async function checkQuiet(
  db: pg.Pool,
  slot: string,
  windowMs: number,
  signal: AbortSignal,
): Promise<QuietCheck> {
  const from = Date.now();
  const pausedAt = await slotSample(db, slot);
  let settled = false;
  while (pausedAt && Date.now() - from < SETTLE_TIMEOUT_MS) {
    const s = await slotSample(db, slot);
    if (s && s.confirmed >= pausedAt.current) {
      settled = true;
      break;
    }
    await sleep(250, undefined, { signal });
  }
  const settleS = Math.round((Date.now() - from) / 100) / 10;
  const start = await slotSample(db, slot);
  const windowEnd = Date.now() + windowMs;
  let advances = 0;
  let last = start;
  while (Date.now() < windowEnd) {
    await sleep(500, undefined, { signal });
    const s = await slotSample(db, slot);
    if (s && last && s.confirmed > last.confirmed) advances++;
    if (s) last = s;
  }
  const end = await slotSample(db, slot);
  if (!start || !end) {
    return {
      settleS,
      settled,
      advancedBytes: 0,
      advances: 0,
      lagBytesAtEnd: 0,
      retainedBytesAtStart: 0,
      retainedBytesAtEnd: 0,
      ok: false,
      problem: 'the slot could not be read',
    };
  }
  const check = {
    settleS,
    settled,
    advancedBytes: Number(end.confirmed - start.confirmed),
    advances,
    lagBytesAtEnd: Number(end.current - end.confirmed),
    retainedBytesAtStart: Number(start.current - start.restart),
    retainedBytesAtEnd: Number(end.current - end.restart),
  };
  const problems = [
    settled
      ? ''
      : `the slot did not confirm the WAL written before the pause within ${SETTLE_TIMEOUT_MS / 1000} s`,
    check.advancedBytes > 0 ? '' : 'the confirmed position did not move during the quiet window',
    check.lagBytesAtEnd <= QUIET_MAX_LAG_BYTES
      ? ''
      : `${check.lagBytesAtEnd} bytes unconfirmed at the window's end (bound ${QUIET_MAX_LAG_BYTES})`,
    check.retainedBytesAtEnd <= check.retainedBytesAtStart + QUIET_MAX_RETAINED_GROWTH_BYTES
      ? ''
      : `retained WAL grew from ${check.retainedBytesAtStart} to ${check.retainedBytesAtEnd} bytes`,
  ].filter(Boolean);
  return {
    ...check,
    ok: problems.length === 0,
    ...(problems.length > 0 ? { problem: problems.join('; ') } : {}),
  };
}
