/**
 * The outbox loop blog posts write: every 500 ms select 100 unpublished rows in id order,
 * publish them one by one (awaiting each PubAck), mark them published one by one. It holds
 * the global order (one loop, one row at a time) and runs at a few hundred events/s, so the
 * harness gives it a smaller backlog. One loop only: a second copy would publish the same rows.
 */

import type { BenchContext, DrainResult, DrainSystem, DrainWorkload } from '../types.js';
import { benchEvent, inChunks } from '../workload.js';
import { AckCounter, type Broker, ident, inTransaction, openBroker, subjectOf } from './shared.js';

const TICK_MS = 500;
const BATCH = 100;

export function naiveLoopSystem(): DrainSystem {
  let broker: Broker | undefined;
  let stopped = false;
  const table = (ctx: BenchContext) => `${ident(ctx.schema)}.naive_outbox`;

  return {
    name: 'naive loop',

    async load(ctx: BenchContext, workload: DrainWorkload): Promise<void> {
      await ctx.pool.query(`CREATE TABLE IF NOT EXISTS ${table(ctx)} (
        id bigserial PRIMARY KEY, topic text NOT NULL, payload jsonb NOT NULL,
        published boolean NOT NULL DEFAULT false, created_at timestamptz NOT NULL DEFAULT now())`);
      await inChunks(workload.events, 1000, (from, count) =>
        inTransaction(ctx.pool, async (client) => {
          const events = Array.from({ length: count }, (_, k) =>
            benchEvent(from + k, workload.aggregates, workload.payloadBytes),
          );
          await client.query(
            `INSERT INTO ${table(ctx)} (topic, payload) SELECT * FROM unnest($1::text[], $2::jsonb[])`,
            [events.map((e) => subjectOf(ctx, e)), events.map((e) => JSON.stringify(e.payload))],
          );
        }),
      );
    },

    async drain(ctx: BenchContext, workload: DrainWorkload): Promise<DrainResult> {
      if (workload.relays > 1) {
        throw new Error('naive loop: relays > 1 is not supported (two loops would publish the same rows)');
      }
      const js = await openBroker(ctx);
      broker = js;
      stopped = false;
      const acks = new AckCounter(workload.events);
      let idleTicks = 0;
      while (acks.delivered < workload.events) {
        if (stopped) throw new Error('naive loop: stopped before the backlog was drained');
        const tick = performance.now();
        const { rows } = await ctx.pool.query<{ id: string; topic: string; payload: string }>(
          `SELECT id, topic, payload::text AS payload FROM ${table(ctx)} WHERE NOT published ORDER BY id LIMIT ${BATCH}`,
        );
        idleTicks = rows.length === 0 ? idleTicks + 1 : 0;
        if (idleTicks * TICK_MS > 60_000) {
          throw new Error(`naive loop: table empty after ${acks.delivered}/${workload.events} events`);
        }
        for (const row of rows) {
          await js.publish(row.topic, row.payload, `naive-${row.id}`);
          acks.ack(row.id);
          await ctx.pool.query(`UPDATE ${table(ctx)} SET published = true WHERE id = $1`, [row.id]);
        }
        const wait = TICK_MS - (performance.now() - tick);
        if (wait > 0 && acks.delivered < workload.events) await new Promise((r) => setTimeout(r, wait));
      }
      return await acks.done();
    },

    async teardown(): Promise<void> {
      stopped = true;
      await broker?.close();
      broker = undefined;
    },
  };
}
