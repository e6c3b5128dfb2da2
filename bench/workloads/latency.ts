/**
 * W2 steady-state latency: 8 producer connections commit one business row and one event per
 * transaction at a fixed offered rate (open loop: each transaction has a scheduled start); one
 * relay process publishes to JetStream; a JetStream consumer timestamps each receipt.
 * Latency = receipt time - the moment COMMIT returned to the producer.
 *
 * Where the ends run (`placement`): 'separate' (the default) runs the producers and the
 * measuring consumer each in a process of their own (latency-ends.ts), on one monotonic clock:
 * no end shares an event loop with the other or with the harness (its CPU sampling), so neither
 * a commit nor a receipt is timed late because the other end was busy. 'harness' runs both in
 * the harness process, as W2 used to. `pacing` (latency-ends.ts): 'steady' (the default), one
 * schedule for all connections, each transaction on whichever connection is free; 'loose', a
 * schedule per connection, as W2 used to.
 *
 * The system under test is a `LatencySystem`: tx-outbox's polling relay (the default), the CDC
 * relay with table-mode or WAL-mode producers, the lean reference relays (systems/lean-relay.ts),
 * or a peer. CPU per 1,000 events of the relay, its PostgreSQL backends and NATS is read over the
 * producing part (bench/cpu.ts); the producers' own backends are not counted.
 */
import { readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect } from '@nats-io/transport-node';
import type pg from 'pg';
import { enqueue, ensureCdcSlot, migrate } from '../../src/index.js';
import { CpuMeter } from '../cpu.js';
import { benchContext, percentile } from '../lib.js';
import { compiledScript, hasExited, type RelayChild, spawnRelayChild } from '../systems/child.js';
import { dropReplicationObjects } from '../systems/peers/shared.js';
import {
  applicationNameOf,
  cdcNamesOf,
  type ProducerVia,
  type RelaySource,
  spawnRelay,
  stopRelay,
  whenStarted,
} from '../systems/tx-outbox.js';
import type { BenchContext, CpuPer1000 } from '../systems/types.js';
import {
  consume,
  type LatencyEnqueue,
  type Lateness,
  type Produced,
  type ProduceOptions,
  type ProducerContext,
  type ProducerSpec,
  produce,
} from './latency-ends.js';

export type { LatencyEvent } from './latency-ends.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** What W2 runs: its tables and relay, and where its producers' write of one event lives. */
export interface LatencySystem {
  readonly name: string;
  /** Creates what the producers write to, starts the relay; a CPU meter over its processes. */
  start(ctx: BenchContext): Promise<CpuMeter>;
  /** The producer's write of one event (loaded by the producer process: latency-ends.ts). */
  readonly producer: ProducerSpec;
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
    producer: txOutboxProducer(via),
    async stop(ctx) {
      if (relay) await stopRelay(relay);
      relay = undefined;
      if (cdc) await dropReplicationObjects(ctx, await cdcNamesOf(ctx));
    },
  };
}

/** tx-outbox's `enqueue` as W2's producers call it (`txOutboxEnqueue`). */
export function txOutboxProducer(via: ProducerVia = 'table'): ProducerSpec {
  return { module: 'bench/workloads/latency.ts', factory: 'txOutboxEnqueue', args: { via } };
}

/** W2's event, written with tx-outbox's `enqueue` in the producer's transaction; its event id. */
export function txOutboxEnqueue(ctx: ProducerContext, args?: { via?: ProducerVia }): LatencyEnqueue {
  const options = { schema: ctx.schema, ...(args?.via === 'wal' ? { via: 'wal' as const } : {}) };
  return async (client, event) => {
    const { eventId } = await enqueue(
      client,
      {
        aggregateType: 'order',
        aggregateId: event.aggregateId,
        type: 'order.placed',
        topic: event.topic,
        payload: event.payload,
      },
      options,
    );
    return eventId;
  };
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
  /** How late the producers' transactions started against their schedule, ms. */
  readonly lateness: Lateness;
  /** Events received more than a second after their commit, and how many aggregates they are of. */
  readonly overSecond: { readonly events: number; readonly aggregates: number };
  /** p99 of the event loop's delay where the producers and the consumer ran, ms. */
  readonly loopDelayP99: { readonly producers: number; readonly consumer: number };
}

/** Where W2's producers and measuring consumer run (see the top of this file). */
export type LatencyPlacement = 'separate' | 'harness';

/** The producers, in a process of their own or (placement 'harness') in this one. */
async function runProducers(
  options: ProduceOptions,
  placement: LatencyPlacement,
  started: () => Promise<void>,
): Promise<Produced> {
  if (placement === 'harness') return await produce(options, started);
  const out = join(tmpdir(), `txo-w2-producers-${process.pid}-${Date.now()}.json`);
  const child = spawnRelayChild(
    ['--import', 'tsx', join(ROOT, 'bench', 'latency-producer-process.ts')],
    'TXO_BENCH_PRODUCERS',
    { ...options, out },
    false,
  );
  const exited = new Promise<void>((resolve) => child.child.once('exit', () => resolve()));
  try {
    await whenStarted(child);
    await started();
    child.child.kill('SIGUSR2');
    await exited;
    if (!child.lines.some((l) => l.includes('"done"'))) {
      throw new Error(`the producer process failed (${child.child.exitCode ?? child.child.signalCode})`);
    }
    return JSON.parse(readFileSync(out, 'utf8')) as Produced;
  } finally {
    if (!hasExited(child)) child.child.kill('SIGKILL');
    rmSync(out, { force: true });
  }
}

/** The measuring consumer, in a process of its own or (placement 'harness') in this one. */
async function startConsumer(
  ctx: BenchContext,
  placement: LatencyPlacement,
): Promise<{
  count(): number;
  stop(): Promise<{ received: Map<string, number>; loopDelayP99: number }>;
  /** Ends it at once (after a failure). */
  kill(): void;
}> {
  if (placement === 'harness') {
    const nc = await connect({ servers: ctx.natsUrl });
    const consuming = await consume(nc, ctx.stream);
    return {
      count: () => consuming.received.size,
      async stop() {
        const { loopDelayP99 } = await consuming.stop();
        await nc.close();
        return { received: consuming.received, loopDelayP99 };
      },
      kill: () => void consuming.stop().then(() => nc.close()),
    };
  }
  const out = join(tmpdir(), `txo-w2-consumer-${process.pid}-${Date.now()}.json`);
  // Compiled: no TypeScript loader in the process that times the receipts.
  const child = spawnRelayChild(
    [compiledScript('bench/latency-consumer-process.ts')],
    'TXO_BENCH_CONSUMER',
    { natsUrl: ctx.natsUrl, stream: ctx.stream, out },
    false,
  );
  await whenStarted(child);
  return {
    count() {
      for (let i = child.lines.length - 1; i >= 0; i--) {
        const m = /^\{"count":(\d+)\}$/.exec(child.lines[i]!);
        if (m) return Number(m[1]);
      }
      return 0;
    },
    async stop() {
      try {
        await stopRelay(child);
        if (!child.lines.some((l) => l.includes('"done"'))) throw new Error('the consumer process failed');
        const result = JSON.parse(readFileSync(out, 'utf8')) as {
          received: Array<[string, number]>;
          loopDelayP99: number;
        };
        return { received: new Map(result.received), loopDelayP99: result.loopDelayP99 };
      } finally {
        rmSync(out, { force: true });
      }
    },
    kill() {
      if (!hasExited(child)) child.child.kill('SIGKILL');
      rmSync(out, { force: true });
    },
  };
}

export async function latencyRun(
  pool: pg.Pool,
  options: {
    rate: number;
    seconds: number;
    connections?: number;
    system?: LatencySystem;
    /** Wait before the producers start (the relay takes its partitions); default 1,500 ms. */
    settleMs?: number;
    /** Where the producers and the measuring consumer run; default 'separate'. */
    placement?: LatencyPlacement;
    /** How the producers are paced (latency-ends.ts); default 'steady'. */
    pacing?: ProduceOptions['pacing'];
  },
): Promise<LatencyResult> {
  const connections = options.connections ?? 8;
  const system = options.system ?? txOutboxLatencySystem();
  const placement = options.placement ?? 'separate';
  const ctx = await benchContext(pool);
  let stopNeeded = false;
  let consumer: Awaited<ReturnType<typeof startConsumer>> | undefined;
  let stopped = false;
  try {
    await pool.query(
      `CREATE TABLE "${ctx.schema}".orders (id bigserial PRIMARY KEY, payload jsonb NOT NULL)`,
    );
    stopNeeded = true;
    const cpu = await system.start(ctx);
    consumer = await startConsumer(ctx, placement);
    // Let the relay take its partitions and settle.
    await new Promise((r) => setTimeout(r, options.settleMs ?? 1500));

    let sampling = false;
    let sampler: Promise<void> = Promise.resolve();
    const produced = await runProducers(
      {
        databaseUrl: ctx.databaseUrl,
        root: ROOT,
        ctx: { schema: ctx.schema, subjectPrefix: ctx.subjectPrefix, stream: ctx.stream },
        producer: system.producer,
        rate: options.rate,
        seconds: options.seconds,
        connections,
        pacing: options.pacing ?? 'steady',
      },
      placement,
      async () => {
        await cpu.sample();
        sampling = true;
        sampler = (async () => {
          while (sampling) {
            await new Promise((r) => setTimeout(r, 250));
            await cpu.sample();
          }
        })();
      },
    );
    const committed = produced.committed;
    const deadline = performance.now() + 15_000;
    while (consumer.count() < committed.length && performance.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    sampling = false;
    await sampler;
    await cpu.sample();
    stopped = true;
    const { received, loopDelayP99 } = await consumer.stop();

    const latencies: number[] = [];
    /** Aggregates with an event later than a second: held back, not slow. */
    const heldBack = new Set<string>();
    let overSecond = 0;
    for (const [id, t, aggregate] of committed) {
      const r = received.get(id);
      if (r === undefined) continue;
      latencies.push(r - t);
      if (r - t > 1000) {
        overSecond += 1;
        heldBack.add(aggregate);
      }
    }
    latencies.sort((a, b) => a - b);
    return {
      offeredRate: options.rate,
      achievedRate: committed.length / produced.seconds,
      received: latencies.length,
      p50: percentile(latencies, 50),
      p95: percentile(latencies, 95),
      p99: percentile(latencies, 99),
      max: latencies[latencies.length - 1] ?? Number.NaN,
      cpu: cpu.per1000(received.size),
      lateness: produced.lateness,
      overSecond: { events: overSecond, aggregates: heldBack.size },
      loopDelayP99: { producers: produced.loopDelayP99, consumer: loopDelayP99 },
    };
  } finally {
    if (consumer && !stopped) consumer.kill();
    if (stopNeeded) await system.stop(ctx).catch(() => undefined);
    await ctx.close();
  }
}
