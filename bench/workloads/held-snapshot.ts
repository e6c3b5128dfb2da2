/**
 * W6 — a held snapshot: what a long transaction on another connection (a report, a pg_dump, a
 * forgotten BEGIN) costs the relay. While it is open, PostgreSQL can neither prune the rows the
 * relay deletes nor mark their index entries dead, so every claim walks past all of them.
 *
 * The snapshot: on its own connection `BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1 FROM
 * <schema>.events LIMIT 1;`, then idle in that transaction until the phase ends, then ROLLBACK
 * (always, and the connection closed, whatever happened in the run).
 *
 * Two phases, each run without and with the snapshot held:
 * (a) steady: 8 producers (business row + tx-outbox `enqueue` per transaction, as W2's) offer
 *     `rate` events/s for `seconds` while one relay process (bench/relay-process.mjs) drains
 *     them; the snapshot is taken once the relay is up, before the producers start. The relay's
 *     claim time comes from its own stats (`stats.timings.claim`: mean, max, p50, p99 in ms over
 *     its lifetime, printed when it stops).
 * (b) drain: the snapshot is taken on the migrated, empty outbox; then the backlog is loaded
 *     (loadOutbox, as W1) and one relay process drains it, timed as W1 (from the process being up
 *     until the table is empty). Events/s, and the relay's claim times.
 */
import pg from 'pg';
import { enqueue, migrate } from '../../src/index.js';
import { CpuMeter } from '../cpu.js';
import { benchContext } from '../lib.js';
import { finalStats, hasExited, type RelayChild, stopRelay, whenStarted } from '../systems/child.js';
import { applicationNameOf, loadOutbox, pendingCount, spawnRelay } from '../systems/tx-outbox.js';
import type { BenchContext, CpuPer1000, DrainWorkload } from '../systems/types.js';
import { openLoop } from './open-loop.js';

/** The relay's claim statement times, ms (NaN where its build does not report them). */
export interface ClaimTiming {
  readonly mean: number;
  readonly max: number;
  readonly p50: number;
  readonly p99: number;
}

export interface HeldSteadyRun {
  readonly held: boolean;
  readonly offeredRate: number;
  readonly achievedRate: number;
  /** Seconds after the producers stopped until the outbox was empty. */
  readonly catchUpSeconds: number;
  readonly claim: ClaimTiming;
  readonly batches: number;
  /** Dead rows in the events table when the phase ended (pg_stat_user_tables). */
  readonly deadRows: number;
}

export interface HeldDrainRun {
  readonly held: boolean;
  readonly events: number;
  readonly seconds: number;
  readonly perSecond: number;
  readonly claim: ClaimTiming;
  readonly batches: number;
  readonly cpu: CpuPer1000;
  readonly deadRows: number;
}

/** A snapshot held open on a connection of its own; `release()` rolls it back and closes it. */
export interface HeldSnapshot {
  /** Throws unless the transaction is still open and still holds its xmin. */
  check(): Promise<void>;
  release(): Promise<void>;
}

export async function holdSnapshot(ctx: BenchContext): Promise<HeldSnapshot> {
  const client = new pg.Client({
    connectionString: ctx.databaseUrl,
    application_name: `held-snapshot-${ctx.schema}`,
  });
  // A broken connection must not crash the harness: the next query fails instead.
  client.on('error', () => undefined);
  await client.connect();
  let released = false;
  const release = async (): Promise<void> => {
    if (released) return;
    released = true;
    try {
      await client.query('ROLLBACK');
    } finally {
      await client.end();
    }
  };
  try {
    await client.query('SET idle_in_transaction_session_timeout = 0');
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await client.query(`SELECT 1 FROM "${ctx.schema}".events LIMIT 1`);
    const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const pid = rows[0]!.pid;
    return {
      async check() {
        const { rows: state } = await ctx.pool.query<{ state: string; xmin: string | null }>(
          'SELECT state, backend_xmin::text AS xmin FROM pg_stat_activity WHERE pid = $1',
          [pid],
        );
        if (state[0]?.state !== 'idle in transaction' || state[0].xmin === null) {
          throw new Error(`the held snapshot is gone (${JSON.stringify(state[0] ?? 'no backend')})`);
        }
      },
      release,
    };
  } catch (error) {
    await release().catch(() => undefined);
    throw error;
  }
}

/** Runs `body` with a snapshot held (when `held`), released whatever happens. */
async function withSnapshot<T>(
  ctx: BenchContext,
  held: boolean,
  body: (snapshot: HeldSnapshot | undefined) => Promise<T>,
): Promise<T> {
  const snapshot = held ? await holdSnapshot(ctx) : undefined;
  try {
    const result = await body(snapshot);
    await snapshot?.check();
    return result;
  } finally {
    await snapshot?.release().catch(() => undefined);
  }
}

function claimOf(relay: RelayChild): { claim: ClaimTiming; batches: number } {
  const stats = finalStats(relay) as
    | { batches?: number; timings?: { claim?: Partial<ClaimTiming> } }
    | undefined;
  const claim = stats?.timings?.claim ?? {};
  return {
    claim: {
      mean: claim.mean ?? Number.NaN,
      max: claim.max ?? Number.NaN,
      p50: claim.p50 ?? Number.NaN,
      p99: claim.p99 ?? Number.NaN,
    },
    batches: stats?.batches ?? 0,
  };
}

async function deadRows(ctx: BenchContext): Promise<number> {
  const { rows } = await ctx.pool.query<{ n: string | null }>(
    'SELECT n_dead_tup::text AS n FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2',
    [ctx.schema, 'events'],
  );
  return Number(rows[0]?.n ?? Number.NaN);
}

/** Waits until the outbox is empty (failing after `timeoutMs` or when the relay exits); seconds waited. */
async function untilEmpty(
  ctx: BenchContext,
  relay: RelayChild,
  timeoutMs: number,
  tick?: (polls: number) => Promise<void>,
): Promise<number> {
  const started = performance.now();
  let polls = 0;
  for (;;) {
    const left = await pendingCount(ctx);
    if (left === 0) return (performance.now() - started) / 1000;
    if (hasExited(relay)) {
      throw new Error(`the relay process exited (${relay.child.exitCode ?? relay.child.signalCode})`);
    }
    if (performance.now() - started > timeoutMs) {
      throw new Error(`${left} events still pending after ${timeoutMs / 1000} s`);
    }
    await new Promise((r) => setTimeout(r, 20));
    await tick?.(++polls);
  }
}

/** Stops the relay if it still runs (a failed run). */
async function stopQuietly(relay: RelayChild | undefined): Promise<void> {
  if (relay) await stopRelay(relay).catch(() => relay.child.kill('SIGKILL'));
}

/** Phase (a): producers at `rate` events/s for `seconds`, one relay draining, snapshot held or not. */
export async function heldSteadyRun(
  pool: pg.Pool,
  options: { rate: number; seconds: number; held: boolean; connections?: number },
): Promise<HeldSteadyRun> {
  const ctx = await benchContext(pool);
  let relay: RelayChild | undefined;
  try {
    await migrate(ctx.pool, { schema: ctx.schema });
    await pool.query(
      `CREATE TABLE "${ctx.schema}".orders (id bigserial PRIMARY KEY, payload jsonb NOT NULL)`,
    );
    const r = spawnRelay(ctx, 0, 1000);
    relay = r;
    await whenStarted(r);
    // Let the relay take its partitions and settle, as W2 does.
    await new Promise((res) => setTimeout(res, 1500));
    return await withSnapshot(ctx, options.held, async () => {
      const payload = { sku: 'ABC-123', quantity: 2, note: 'x'.repeat(200) };
      const produced = await openLoop(
        pool,
        { rate: options.rate, seconds: options.seconds, connections: options.connections ?? 8 },
        async (client, c, k) => {
          await client.query('BEGIN');
          await client.query(`INSERT INTO "${ctx.schema}".orders (payload) VALUES ($1)`, [payload]);
          await enqueue(
            client,
            {
              aggregateType: 'order',
              aggregateId: `c${c}-${k % 100}`,
              type: 'order.placed',
              topic: `${ctx.subjectPrefix}.order.placed`,
              payload,
            },
            { schema: ctx.schema },
          );
          await client.query('COMMIT');
        },
      );
      const catchUpSeconds = await untilEmpty(ctx, r, 120_000);
      const dead = await deadRows(ctx);
      await stopRelay(r);
      return {
        held: options.held,
        offeredRate: options.rate,
        achievedRate: produced.transactions / produced.seconds,
        catchUpSeconds,
        ...claimOf(r),
        deadRows: dead,
      };
    });
  } finally {
    await stopQuietly(relay);
    await ctx.close();
  }
}

/** Phase (b): a backlog loaded after the snapshot was taken, drained by one relay process. */
export async function heldDrainRun(
  pool: pg.Pool,
  workload: Omit<DrainWorkload, 'relays'>,
  held: boolean,
): Promise<HeldDrainRun> {
  const ctx = await benchContext(pool);
  let relay: RelayChild | undefined;
  try {
    await migrate(ctx.pool, { schema: ctx.schema });
    return await withSnapshot(ctx, held, async () => {
      await loadOutbox(ctx, { ...workload, relays: 1 });
      const r = spawnRelay(ctx, 0, 1000);
      relay = r;
      await whenStarted(r);
      const cpu = new CpuMeter(ctx.pool, {
        relayPids: [r.child.pid!],
        applicationName: applicationNameOf(ctx),
      });
      await cpu.sample();
      const seconds = await untilEmpty(ctx, r, 600_000, async (polls) => {
        if (polls % 5 === 0) await cpu.sample();
      });
      await cpu.sample();
      const dead = await deadRows(ctx);
      await stopRelay(r);
      return {
        held,
        events: workload.events,
        seconds,
        perSecond: workload.events / seconds,
        ...claimOf(r),
        cpu: cpu.per1000(workload.events),
        deadRows: dead,
      };
    });
  } finally {
    await stopQuietly(relay);
    await ctx.close();
  }
}
