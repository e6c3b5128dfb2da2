/**
 * W2 steady-state latency: 8 producer connections commit one business row and
 * one event per transaction at a fixed offered rate (open loop: each
 * transaction has a scheduled start); one relay process publishes to
 * JetStream; a JetStream consumer in this process timestamps each receipt.
 * Latency = receipt time - the moment COMMIT returned to the producer.
 *
 * The system under test is a `LatencySystem`: tx-outbox's polling relay (the default), the CDC
 * relay with table-mode or WAL-mode producers, the lean reference relay (systems/lean-relay.ts),
 * or a peer. CPU per 1,000 events of the relay,
 * its PostgreSQL backends and NATS is read over the producing part (bench/cpu.ts); the
 * producers' own backends are not counted.
 */
import { jetstream } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type pg from 'pg';
import { enqueue, ensureCdcSlot, migrate } from '../../src/index.js';
import { CpuMeter } from '../cpu.js';
import { benchContext, percentile } from '../lib.js';
import { dropReplicationObjects } from '../systems/peers/shared.js';
import {
  applicationNameOf,
  cdcNamesOf,
  type ProducerVia,
  type RelayChild,
  type RelaySource,
  spawnRelay,
  stopRelay,
  whenStarted,
} from '../systems/tx-outbox.js';
import type { BenchContext, CpuPer1000 } from '../systems/types.js';
import { openLoop } from './open-loop.js';

/** One event a W2 producer writes in its business transaction. */
export interface LatencyEvent {
  readonly aggregateId: string;
  /** The aggregate's sequence as this producer counts it (for peers without one of their own). */
  readonly sequence: number;
  readonly topic: string;
  readonly payload: Readonly<Record<string, unknown>>;
}

/** What W2 runs: its tables and relay, and the producer's write of one event. */
export interface LatencySystem {
  readonly name: string;
  /** Creates what the producers write to, starts the relay; a CPU meter over its processes. */
  start(ctx: BenchContext): Promise<CpuMeter>;
  /** Writes one event in the transaction open on `client`; the event id the consumer sees as ce-id. */
  enqueue(ctx: BenchContext, client: pg.PoolClient, event: LatencyEvent): Promise<string>;
  /** Stops the relay, drops anything server-wide (slots, publications). */
  stop(ctx: BenchContext): Promise<void>;
}

/** tx-outbox's relay: polling (the default) or CDC, producers writing rows or WAL messages. */
export function txOutboxLatencySystem(
  options: { source?: RelaySource; via?: ProducerVia } = {},
): LatencySystem {
  const source = options.source ?? 'poll';
  const via = options.via ?? 'table';
  const cdc = source === 'cdc' || via === 'wal';
  let relay: RelayChild | undefined;
  return {
    name:
      source === 'cdc'
        ? `tx-outbox CDC relay (${via === 'wal' ? 'WAL-mode producers' : 'table mode'})`
        : 'tx-outbox (polling relay)',
    async start(ctx) {
      await migrate(ctx.pool, { schema: ctx.schema });
      if (cdc) await ensureCdcSlot(ctx.pool, { schema: ctx.schema });
      relay = spawnRelay(ctx, 0, 1000, undefined, undefined, { source });
      await whenStarted(relay);
      return new CpuMeter(ctx.pool, {
        relayPids: [relay.child.pid!],
        applicationName: applicationNameOf(ctx),
        ...(cdc ? { slot: (await cdcNamesOf(ctx)).slot } : {}),
      });
    },
    enqueue: (ctx, client, event) => enqueueLatencyEvent(ctx, client, event, via),
    async stop(ctx) {
      if (relay) await stopRelay(relay);
      relay = undefined;
      if (cdc) await dropReplicationObjects(ctx, await cdcNamesOf(ctx));
    },
  };
}

/** W2's event, written with tx-outbox's `enqueue` in the producer's transaction; its event id. */
export async function enqueueLatencyEvent(
  ctx: BenchContext,
  client: pg.PoolClient,
  event: LatencyEvent,
  via?: ProducerVia,
): Promise<string> {
  const { eventId } = await enqueue(
    client,
    {
      aggregateType: 'order',
      aggregateId: event.aggregateId,
      type: 'order.placed',
      topic: event.topic,
      payload: event.payload,
    },
    { schema: ctx.schema, ...(via === 'wal' ? { via: 'wal' as const } : {}) },
  );
  return eventId;
}

export interface LatencyResult {
  readonly offeredRate: number;
  readonly achievedRate: number;
  readonly received: number;
  readonly p50: number;
  readonly p95: number;
  readonly p99: number;
  readonly max: number;
  /** CPU ms per 1,000 events by process over the producing part. */
  readonly cpu: CpuPer1000;
}

const now = (): number => performance.timeOrigin + performance.now();

export async function latencyRun(
  pool: pg.Pool,
  options: {
    rate: number;
    seconds: number;
    connections?: number;
    system?: LatencySystem;
    /** Wait before the producers start (the relay takes its partitions); default 1,500 ms. */
    settleMs?: number;
  },
): Promise<LatencyResult> {
  const connections = options.connections ?? 8;
  const system = options.system ?? txOutboxLatencySystem();
  const ctx = await benchContext(pool);
  let stopNeeded = false;
  const nc = await connect({ servers: ctx.natsUrl });
  try {
    await pool.query(
      `CREATE TABLE "${ctx.schema}".orders (id bigserial PRIMARY KEY, payload jsonb NOT NULL)`,
    );
    stopNeeded = true;
    const cpu = await system.start(ctx);

    const received = new Map<string, number>();
    const consumer = await jetstream(nc).consumers.get(ctx.stream);
    const messages = await consumer.consume({ max_messages: 5000 });
    const consuming = (async () => {
      for await (const m of messages) {
        const id = m.headers?.get('ce-id');
        if (id && !received.has(id)) received.set(id, now());
      }
    })();
    // Let the relay take its partitions and settle.
    await new Promise((r) => setTimeout(r, options.settleMs ?? 1500));

    const committed = new Map<string, number>();
    const payload = { sku: 'ABC-123', quantity: 2, note: 'x'.repeat(200) };
    await cpu.sample();
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        await new Promise((r) => setTimeout(r, 250));
        await cpu.sample();
      }
    })();
    const { seconds: elapsed } = await openLoop(
      pool,
      { rate: options.rate, seconds: options.seconds, connections },
      async (client, c, k) => {
        await client.query('BEGIN');
        await client.query(`INSERT INTO "${ctx.schema}".orders (payload) VALUES ($1)`, [payload]);
        const eventId = await system.enqueue(ctx, client, {
          aggregateId: `c${c}-${k % 100}`,
          sequence: Math.floor(k / 100) + 1,
          topic: `${ctx.subjectPrefix}.order.placed`,
          payload,
        });
        await client.query('COMMIT');
        committed.set(eventId, now());
      },
    );
    const deadline = now() + 15_000;
    while (received.size < committed.size && now() < deadline) await new Promise((r) => setTimeout(r, 20));
    sampling = false;
    await sampler;
    await cpu.sample();
    messages.stop();
    await consuming.catch(() => undefined);

    const latencies: number[] = [];
    for (const [id, t] of committed) {
      const r = received.get(id);
      if (r !== undefined) latencies.push(r - t);
    }
    latencies.sort((a, b) => a - b);
    return {
      offeredRate: options.rate,
      achievedRate: committed.size / elapsed,
      received: latencies.length,
      p50: percentile(latencies, 50),
      p95: percentile(latencies, 95),
      p99: percentile(latencies, 99),
      max: latencies[latencies.length - 1] ?? Number.NaN,
      cpu: cpu.per1000(received.size),
    };
  } finally {
    if (stopNeeded) await system.stop(ctx).catch(() => undefined);
    await nc.close();
    await ctx.close();
  }
}
