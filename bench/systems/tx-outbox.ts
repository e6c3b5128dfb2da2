/**
 * tx-outbox as the drain benchmarks run it: events written with `enqueue` in
 * business transactions of 1,000, then N relay processes (bench/relay-process.mjs,
 * the built package) drain them into JetStream.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { enqueue, inTransaction, migrate } from '../../src/index.js';
import type { BenchContext, DrainResult, DrainSystem, DrainWorkload } from './types.js';
import { benchEvent, inChunks } from './workload.js';

const RELAY_PROCESS = join(dirname(fileURLToPath(import.meta.url)), '..', 'relay-process.mjs');

export interface RelayChild {
  readonly child: ChildProcess;
  readonly lines: string[];
}

/** One relay process (bench/relay-process.mjs, the built package) on the context's schema and stream. */
export function spawnRelay(ctx: BenchContext, index: number, batchSize: number, mode?: string): RelayChild {
  const config = {
    databaseUrl: ctx.databaseUrl,
    schema: ctx.schema,
    natsUrl: ctx.natsUrl,
    stream: ctx.stream,
    batchSize,
    relayId: `bench-relay-${index}`,
    mode,
  };
  const nodeArgs = (process.env['TXO_RELAY_NODE_ARGS'] ?? '').split(' ').filter(Boolean);
  // TXO_BENCH_RELAY_PROCESS: another build's relay-process.mjs (bench/tracing.ts --base).
  const script = process.env['TXO_BENCH_RELAY_PROCESS'] ?? RELAY_PROCESS;
  const child = spawn(process.execPath, [...nodeArgs, script], {
    env: { ...process.env, TXO_BENCH_RELAY: JSON.stringify(config) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (chunk: string) => lines.push(...chunk.split('\n').filter(Boolean)));
  return { child, lines };
}

export async function whenStarted(r: RelayChild): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    if (r.lines.some((l) => l.includes('"started"'))) return;
    if (r.child.exitCode !== null) throw new Error('a relay process exited before it started');
    await new Promise((res) => setTimeout(res, 5));
  }
  throw new Error('a relay process did not start within 10 s');
}

/** Stops a relay process gracefully; its peak RSS in MB when it reported one. */
export async function stopRelay(r: RelayChild): Promise<number | undefined> {
  const exited = new Promise((resolve) => r.child.once('exit', resolve));
  r.child.kill('SIGTERM');
  await exited;
  for (const line of r.lines) {
    const parsed = JSON.parse(line) as { peakRssMb?: number };
    if (parsed.peakRssMb !== undefined) return parsed.peakRssMb;
  }
  return undefined;
}

export async function pendingCount(ctx: BenchContext): Promise<number> {
  const { rows } = await ctx.pool.query(`SELECT count(*)::int AS n FROM "${ctx.schema}".events`);
  return rows[0].n as number;
}

export async function loadOutbox(ctx: BenchContext, workload: DrainWorkload): Promise<void> {
  await migrate(ctx.pool, { schema: ctx.schema });
  await inChunks(workload.events, 1000, (from, count) =>
    inTransaction(ctx.pool, async (client) => {
      const events = Array.from({ length: count }, (_, k) => {
        const e = benchEvent(from + k, workload.aggregates, workload.payloadBytes);
        return {
          aggregateType: e.aggregateType,
          aggregateId: e.aggregateId,
          type: e.type,
          topic: `${ctx.subjectPrefix}.${e.subjectSuffix}`,
          payload: e.payload,
        };
      });
      await enqueue(client, events, { schema: ctx.schema });
    }),
  );
  await ctx.pool.query(`VACUUM ANALYZE "${ctx.schema}".events`);
}

export function txOutboxSystem(
  options: { batchSize?: number; mode?: 'pipeline' | 'client' } = {},
): DrainSystem {
  const batchSize = options.batchSize ?? 1000;
  let relays: RelayChild[] = [];
  return {
    name: options.mode === 'client' ? 'tx-outbox (js.publish client)' : 'tx-outbox',
    load: loadOutbox,
    async drain(ctx, workload): Promise<DrainResult> {
      relays = Array.from({ length: workload.relays }, (_, i) => spawnRelay(ctx, i, batchSize, options.mode));
      // Timed from the moment the relays are up (node's own boot and imports excluded, as
      // the peers run in the harness process): the relays begin claiming right then.
      await Promise.all(relays.map(whenStarted));
      const started = performance.now();
      while ((await pendingCount(ctx)) > 0) await new Promise((r) => setTimeout(r, 20));
      const seconds = (performance.now() - started) / 1000;
      const peaks = await Promise.all(relays.map(stopRelay));
      relays = [];
      const measured = peaks.filter((p): p is number => p !== undefined);
      return {
        seconds,
        delivered: workload.events,
        ...(measured.length > 0 ? { peakRssMb: Math.max(...measured) } : {}),
      };
    },
    async teardown() {
      for (const r of relays) r.child.kill('SIGKILL');
      relays = [];
    },
  };
}
