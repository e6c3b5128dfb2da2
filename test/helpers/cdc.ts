/**
 * What the CDC failure tests share: a producer that remembers where in the WAL each transaction
 * committed (an upper bound), the slot as PostgreSQL reports it, the clean-up of slots and
 * publications, and the delivery checks (no loss, per-aggregate order of first deliveries).
 */
import type pg from 'pg';
import { resolveCdcNames } from '../../src/cdc/setup.js';
import { type EnqueueOptions, enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';

/** `table` (today's INSERT) or `wal` (`enqueue(…, { via: 'wal' })`). */
export type Via = 'table' | 'wal';

/**
 * The slot and publication names a schema gets by default in the pool's database (the slot:
 * `txo_<database>_<schema>_<hash>`, as the relay resolves it; the publication `txo_<schema>`).
 */
export async function cdcNames(
  pool: pg.Pool,
  schema: string,
): Promise<{ slot: string; publication: string }> {
  const { slot, publication } = await resolveCdcNames(pool, { schema });
  return { slot, publication };
}

/** `count` events over `aggregates` aggregates (`a<i % aggregates>`), topic `<prefix>.order`. */
export function cdcEvents(prefix: string, count: number, aggregates: number, from = 0): OutboxEvent[] {
  return Array.from({ length: count }, (_, k) => {
    const i = from + k;
    return {
      aggregateType: 'order',
      aggregateId: `a${i % aggregates}`,
      type: 'order.changed',
      topic: `${prefix}.order`,
      payload: { i },
    };
  });
}

/** One committed producer transaction: its event ids and a WAL position at or after its commit. */
export interface Committed {
  readonly ids: readonly string[];
  /** pg_current_wal_insert_lsn() read right after COMMIT returned: ≥ the commit record's end. */
  readonly afterLsn: bigint;
}

/** The current WAL insert position, as a number. */
export async function walInsertLsn(q: pg.Pool | pg.PoolClient): Promise<bigint> {
  const { rows } = await q.query(`SELECT (pg_current_wal_insert_lsn() - '0/0')::text AS lsn`);
  return BigInt(rows[0].lsn);
}

/**
 * Enqueues `events` `perTx` at a time, each chunk in a transaction of its own, and returns what
 * committed. A chunk that fails is retried (`retries` attempts, for a server restart) only when
 * its COMMIT was never sent: a failed COMMIT is ambiguous, so `produce` throws rather than guess.
 */
export async function produce(
  pool: pg.Pool,
  schema: string,
  events: readonly OutboxEvent[],
  {
    via = 'table',
    perTx = 1000,
    pauseMs = 0,
    retries = 5,
  }: { via?: Via; perTx?: number; pauseMs?: number; retries?: number } = {},
): Promise<Committed[]> {
  const committed: Committed[] = [];
  const options = (via === 'wal' ? { schema, via: 'wal' } : { schema }) as EnqueueOptions;
  for (let i = 0; i < events.length; i += perTx) {
    const chunk = events.slice(i, i + perTx);
    for (let attempt = 1; ; attempt++) {
      let commitSent = false;
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const results = await enqueue(client, chunk, options);
        commitSent = true;
        await client.query('COMMIT');
        committed.push({ ids: results.map((r) => r.eventId), afterLsn: await walInsertLsn(client) });
        client.release();
        break;
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        client.release(true);
        // A connection a restart killed before COMMIT: nothing was written, write it again.
        if (commitSent || attempt >= retries) throw error;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
  }
  return committed;
}

export interface SlotState {
  readonly exists: boolean;
  readonly active: boolean;
  readonly activePid: number | null;
  /** confirmed_flush_lsn as a number (0n when the slot is missing). */
  readonly confirmed: bigint;
  readonly walStatus: string | null;
}

/** The slot as pg_replication_slots reports it. */
export async function slotState(pool: pg.Pool, slot: string): Promise<SlotState> {
  const { rows } = await pool.query(
    `SELECT active, active_pid, wal_status, (confirmed_flush_lsn - '0/0')::text AS confirmed
       FROM pg_replication_slots WHERE slot_name = $1`,
    [slot],
  );
  const r = rows[0];
  if (!r) return { exists: false, active: false, activePid: null, confirmed: 0n, walStatus: null };
  return {
    exists: true,
    active: r.active,
    activePid: r.active_pid,
    confirmed: r.confirmed === null ? 0n : BigInt(r.confirmed),
    walStatus: r.wal_status,
  };
}

/**
 * Drops the slot (terminating a backend still streaming it, e.g. of a relay the test killed)
 * and the publication: an abandoned slot retains WAL for everyone on the server.
 */
export async function dropCdcObjects(pool: pg.Pool, slot: string, publication: string): Promise<void> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const state = await slotState(pool, slot);
    if (!state.exists) break;
    if (state.active && state.activePid !== null) {
      await pool.query('SELECT pg_terminate_backend($1)', [state.activePid]);
      await new Promise((r) => setTimeout(r, 100));
      continue;
    }
    try {
      await pool.query('SELECT pg_drop_replication_slot($1)', [slot]);
      break;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  await pool.query(`DROP PUBLICATION IF EXISTS "${publication}"`);
}

/** One delivery as the broker holds or saw it. */
export interface Delivery {
  readonly eventId: string;
  readonly aggregateId: string;
  readonly sequence: number;
}

/**
 * Per-aggregate order of first deliveries: for each aggregate, the first time each event id
 * appears (in broker order) its sequence must be the previous first delivery's + 1, from 1.
 */
export function firstDeliveryOrderViolations(deliveries: readonly Delivery[], limit = 20): string[] {
  const seen = new Set<string>();
  const last = new Map<string, number>();
  const problems: string[] = [];
  for (const d of deliveries) {
    if (seen.has(d.eventId)) continue;
    seen.add(d.eventId);
    const prev = last.get(d.aggregateId) ?? 0;
    if (d.sequence !== prev + 1 && problems.length < limit)
      problems.push(`${d.aggregateId}: ${d.sequence} first delivered after ${prev}`);
    last.set(d.aggregateId, Math.max(prev, d.sequence));
  }
  return problems;
}

/** Ids committed but never delivered (at most `limit` of them). */
export function missingIds(
  committed: readonly Committed[],
  delivered: Iterable<string>,
  limit = 20,
): string[] {
  const got = new Set(delivered);
  const missing: string[] = [];
  for (const c of committed)
    for (const id of c.ids) if (!got.has(id) && missing.length < limit) missing.push(id);
  return missing;
}

export function countIds(committed: readonly Committed[]): number {
  return committed.reduce((n, c) => n + c.ids.length, 0);
}

/** Rows left in the events table. */
export async function eventRows(pool: pg.Pool, schema: string): Promise<number> {
  const { rows } = await pool.query(`SELECT count(*)::int AS n FROM "${schema}".events`);
  return rows[0].n;
}

/**
 * An LSN as stats() gives it (PostgreSQL's `16/B374D848`, or a bigint the child printed as
 * decimal) as a number; none yet is 0n.
 */
export function lsnValue(lsn: string | number | bigint | undefined | null): bigint {
  if (lsn === undefined || lsn === null) return 0n;
  if (typeof lsn !== 'string') return BigInt(lsn);
  const slash = lsn.indexOf('/');
  if (slash < 0) return BigInt(lsn);
  return (BigInt(`0x${lsn.slice(0, slash)}`) << 32n) | BigInt(`0x${lsn.slice(slash + 1)}`);
}

/** waitFor whose failure message is written when it fails (a relay's stats then, not at the start). */
export async function waitUntil(
  check: () => Promise<boolean> | boolean,
  {
    timeoutMs = 20_000,
    intervalMs = 100,
    what,
  }: { timeoutMs?: number; intervalMs?: number; what: () => string },
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what()}`);
}
