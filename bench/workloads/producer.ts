/**
 * W3 producer overhead: TPS of a one-row business transaction plus (a) a bare
 * single-row INSERT of the same payload into a plain table, or (b) one
 * `enqueue` (sequence, event row, wake-up check: all of it), from 8
 * connections, interleaved rounds. For (b) the relay process is stopped, so the
 * producer's own cost is compared with the bare INSERT's (whose rows nobody
 * drains either); (c) repeats (b) with the relay draining at the same time, the
 * whole system's cost on this 2-core machine. (b) again with `maxPending` set: the backpressure
 * check's cost (one cached read of the published backlog a second per process).
 */
import type pg from 'pg';
import { enqueue, migrate } from '../../src/index.js';
import { benchContext } from '../lib.js';
import { type RelayChild, spawnRelay, stopRelay, whenStarted } from '../systems/tx-outbox.js';

export const PRODUCER_VARIANTS = [
  'business only',
  'business + bare INSERT',
  'business + enqueue',
  'business + enqueue with maxPending',
  'business + enqueue, relay draining meanwhile',
] as const;
export type ProducerVariant = (typeof PRODUCER_VARIANTS)[number];

export async function producerRuns(
  pool: pg.Pool,
  options: { seconds: number; rounds: number; connections?: number },
): Promise<Record<ProducerVariant, number[]>> {
  const connections = options.connections ?? 8;
  const ctx = await benchContext(pool);
  const s = `"${ctx.schema}"`;
  let relay: RelayChild | undefined;
  try {
    await migrate(pool, { schema: ctx.schema });
    await pool.query(`CREATE TABLE ${s}.orders (id bigserial PRIMARY KEY, payload jsonb NOT NULL)`);
    await pool.query(`CREATE TABLE ${s}.bare (id bigserial PRIMARY KEY, payload jsonb NOT NULL)`);
    const startRelay = async (): Promise<void> => {
      relay = spawnRelay(ctx, 0, 1000);
      await whenStarted(relay);
      await new Promise((r) => setTimeout(r, 1500));
    };
    const stopDraining = async (): Promise<void> => {
      if (relay) await stopRelay(relay);
      relay = undefined;
    };
    const payload = { sku: 'ABC-123', quantity: 2, note: 'x'.repeat(200) };
    const json = JSON.stringify(payload);
    const topic = `${ctx.subjectPrefix}.order.placed`;

    async function round(variant: ProducerVariant): Promise<number> {
      const until = performance.now() + options.seconds * 1000;
      const counts = await Promise.all(
        Array.from({ length: connections }, async (_, c) => {
          const client = await pool.connect();
          let n = 0;
          try {
            while (performance.now() < until) {
              await client.query('BEGIN');
              await client.query({
                name: 'w3_biz',
                text: `INSERT INTO ${s}.orders (payload) VALUES ($1)`,
                values: [json],
              });
              if (variant === 'business + bare INSERT') {
                await client.query({
                  name: 'w3_bare',
                  text: `INSERT INTO ${s}.bare (payload) VALUES ($1)`,
                  values: [json],
                });
              } else if (variant !== 'business only') {
                await enqueue(
                  client,
                  {
                    aggregateType: 'order',
                    aggregateId: `c${c}-${n % 500}`,
                    type: 'order.placed',
                    topic,
                    payload,
                  },
                  variant === 'business + enqueue with maxPending'
                    ? { schema: ctx.schema, maxPending: 1_000_000_000 }
                    : { schema: ctx.schema },
                );
              }
              await client.query('COMMIT');
              n += 1;
            }
          } finally {
            client.release();
          }
          return n;
        }),
      );
      return counts.reduce((a, b) => a + b, 0) / options.seconds;
    }

    const result = Object.fromEntries(PRODUCER_VARIANTS.map((v) => [v, [] as number[]])) as unknown as Record<
      ProducerVariant,
      number[]
    >;
    for (let r = 0; r < options.rounds; r++) {
      for (const v of PRODUCER_VARIANTS) {
        const draining = v === 'business + enqueue, relay draining meanwhile';
        if (draining) await startRelay();
        result[v].push(await round(v));
        if (draining) {
          // Let the relay drain what was written before the next round starts.
          for (let i = 0; i < 600; i++) {
            const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${s}.events`);
            if (rows[0].n === 0) break;
            await new Promise((res) => setTimeout(res, 50));
          }
          await stopDraining();
        } else {
          await pool.query(`DELETE FROM ${s}.events`);
        }
      }
    }
    return result;
  } finally {
    if (relay) await stopRelay(relay);
    await ctx.close();
  }
}
