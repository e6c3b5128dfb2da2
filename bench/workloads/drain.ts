/** W1, W4, W5: one drain of a loaded backlog through one system, in a fresh schema and stream. */
import type pg from 'pg';
import { migrate } from '../../src/index.js';
import { benchContext, streamOrderViolations } from '../lib.js';
import type { BenchContext, DrainResult, DrainSystem, DrainWorkload } from '../systems/types.js';

export interface DrainRun extends DrainResult {
  readonly perSecond: number;
  /** With checkOrder: order violations in the stream plus |messages in the stream - events|. */
  readonly orderViolations?: number;
  /** With checkOrder: how many messages the stream holds. */
  readonly streamMessages?: number;
  readonly skipped?: string;
}

export async function drainRun(
  pool: pg.Pool,
  system: DrainSystem,
  workload: DrainWorkload,
  options: { checkOrder?: boolean; prepare?: (ctx: BenchContext) => Promise<void> } = {},
): Promise<DrainRun> {
  const ctx = await benchContext(pool);
  try {
    if (options.prepare) await options.prepare(ctx);
    try {
      await system.load(ctx, workload);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      if (message.startsWith('SKIP:'))
        return { seconds: 0, delivered: 0, perSecond: Number.NaN, skipped: message };
      throw error;
    }
    const result = await system.drain(ctx, workload);
    const order = options.checkOrder ? await streamOrderViolations(ctx.stream) : undefined;
    return {
      ...result,
      perSecond: result.delivered / result.seconds,
      ...(order
        ? {
            orderViolations: order.violations + Math.abs(order.messages - workload.events),
            streamMessages: order.messages,
          }
        : {}),
    };
  } finally {
    await system.teardown(ctx).catch(() => undefined);
    await ctx.close();
  }
}

/**
 * W4's history: the state the outbox is in after `delivered` events went
 * through it (tx-outbox keeps no delivered rows: what remains is one sequence
 * row and one progress row per aggregate, and a hot table that churned through
 * every insert and delete). Written in bulk with SQL, not relayed, to keep the
 * benchmark short; the deleted rows are left for autovacuum as in production.
 */
export async function simulateHistory(
  ctx: BenchContext,
  delivered: number,
  aggregates: number,
): Promise<void> {
  await migrate(ctx.pool, { schema: ctx.schema });
  const s = `"${ctx.schema}"`;
  const chunk = 500_000;
  for (let from = 0; from < delivered; from += chunk) {
    const to = Math.min(delivered, from + chunk);
    await ctx.pool.query(
      `INSERT INTO ${s}.events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload)
       SELECT gen_random_uuid(), ${s}.partition_of('history', 'h' || (i % $3)), 'history', 'h' || (i % $3), i / $3 + 1, 'old.event',
              jsonb_build_object('i', i, 'filler', repeat('x', 240))
       FROM generate_series($1::bigint, $2::bigint - 1) AS i`,
      [from, to, aggregates],
    );
    await ctx.pool.query(`DELETE FROM ${s}.events WHERE aggregate_type = 'history'`);
  }
  await ctx.pool.query(
    `INSERT INTO ${s}.aggregate_sequences (aggregate_type, aggregate_id, last_sequence)
     SELECT 'history', 'h' || a, ceil($1::numeric / $2) FROM generate_series(0, $2 - 1) AS a`,
    [delivered, aggregates],
  );
  await ctx.pool.query(
    `INSERT INTO ${s}.aggregate_progress (aggregate_type, aggregate_id, delivered_sequence)
     SELECT 'history', 'h' || a, ceil($1::numeric / $2) FROM generate_series(0, $2 - 1) AS a`,
    [delivered, aggregates],
  );
}
