/**
 * W3 producer overhead: TPS of a one-row business transaction plus (a) a bare
 * single-row INSERT of the same payload into a plain table, or (b) one
 * `enqueue` (sequence, event row, wake-up check: all of it), from 8
 * connections, interleaved rounds. For (b) the relay process is stopped, so the
 * producer's own cost is compared with the bare INSERT's (whose rows nobody
 * drains either); (c) repeats (b) with the relay draining at the same time, the
 * whole system's cost on this 2-core machine. (b) again with `maxPending` set: the backpressure
 * check's cost (one cached read of the published backlog a second per process). (b) with caller
 * versions (`sequence` given: each connection's aggregates count their own versions, as a
 * business row's version column would): no sequence row. (b) in WAL mode (`via: 'wal'`): the
 * sequence row and a logical message, no event row (a pgoutput slot exists; nothing reads it
 * during the round, so this is the producer's cost only — decoding is the CDC relay's).
 */
import { readFileSync } from 'node:fs';
import type pg from 'pg';
import { resolveCdcNames } from '../../src/cdc/setup.js';
import { enqueue, migrate } from '../../src/index.js';
import { benchContext } from '../lib.js';
import { type RelayChild, spawnRelay, stopRelay, whenStarted } from '../systems/tx-outbox.js';

export const PRODUCER_VARIANTS = [
  'business only',
  'business + bare INSERT',
  'business + enqueue',
  'business + enqueue, caller version',
  'business + enqueue via WAL',
  'business + enqueue with maxPending',
  'business + enqueue, relay draining meanwhile',
] as const;
export type ProducerVariant = (typeof PRODUCER_VARIANTS)[number];

/** TPS per round, and CPU per transaction (µs) of the database backends and of this process. */
export interface ProducerRuns {
  readonly tps: Record<ProducerVariant, number[]>;
  readonly databaseCpuUs: Record<ProducerVariant, number[]>;
  readonly clientCpuUs: Record<ProducerVariant, number[]>;
}

/** Time a backend has spent on a CPU, in µs (Linux schedstat: any load, ns resolution). */
function backendCpuUs(pid: number): number {
  try {
    return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1000;
  } catch {
    return Number.NaN; // another machine: the database is elsewhere
  }
}

export async function producerRuns(
  pool: pg.Pool,
  options: {
    seconds: number;
    rounds: number;
    connections?: number;
    /** Only these variants (default: all; the others' figures stay empty). */
    variants?: readonly ProducerVariant[];
  },
): Promise<ProducerRuns> {
  const connections = options.connections ?? 8;
  const ctx = await benchContext(pool);
  const s = `"${ctx.schema}"`;
  let relay: RelayChild | undefined;
  // The schema's default slot in this database: what `enqueue(…, { via: 'wal' })` checks.
  const { slot } = await resolveCdcNames(pool, { schema: ctx.schema });
  try {
    await migrate(pool, { schema: ctx.schema });
    await pool.query(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, [slot]);
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

    const perVariant = () =>
      Object.fromEntries(PRODUCER_VARIANTS.map((v) => [v, [] as number[]])) as unknown as Record<
        ProducerVariant,
        number[]
      >;
    const databaseCpuUs = perVariant();
    const clientCpuUs = perVariant();
    async function round(variant: ProducerVariant): Promise<number> {
      const clients = await Promise.all(Array.from({ length: connections }, () => pool.connect()));
      const pids = await Promise.all(
        clients.map(async (c) => Number((await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid)),
      );
      const databaseBefore = pids.map(backendCpuUs);
      const clientBefore = process.cpuUsage();
      const until = performance.now() + options.seconds * 1000;
      const counts = await Promise.all(
        clients.map(async (client, c) => {
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
              } else if (variant === 'business + enqueue, caller version') {
                await enqueue(
                  client,
                  {
                    aggregateType: 'order',
                    aggregateId: `c${c}-${n % 500}`,
                    type: 'order.placed',
                    topic,
                    payload,
                    sequence: Math.floor(n / 500) + 1, // each round's events are deleted before the next
                  },
                  { schema: ctx.schema },
                );
              } else if (variant === 'business + enqueue via WAL') {
                await enqueue(
                  client,
                  {
                    aggregateType: 'order',
                    aggregateId: `c${c}-${n % 500}`,
                    type: 'order.placed',
                    topic,
                    payload,
                  },
                  { schema: ctx.schema, via: 'wal' },
                );
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
      const transactions = counts.reduce((a, b) => a + b, 0);
      const clientCpu = process.cpuUsage(clientBefore);
      const databaseCpu = pids.reduce((sum, pid, i) => sum + backendCpuUs(pid) - databaseBefore[i]!, 0);
      databaseCpuUs[variant].push(databaseCpu / transactions);
      clientCpuUs[variant].push((clientCpu.user + clientCpu.system) / transactions);
      return transactions / options.seconds;
    }

    const result = perVariant();
    for (let r = 0; r < options.rounds; r++) {
      for (const v of options.variants ?? PRODUCER_VARIANTS) {
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
    return { tps: result, databaseCpuUs, clientCpuUs };
  } finally {
    if (relay) await stopRelay(relay);
    // An abandoned slot would retain WAL for everyone.
    await pool.query(
      'SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1',
      [slot],
    );
    await ctx.close();
  }
}
