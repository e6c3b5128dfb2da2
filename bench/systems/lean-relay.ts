/**
 * The lean reference relay (bench/lean-relay-process.ts) as a W1 drain system and a W2 latency
 * system: SELECT … FOR UPDATE SKIP LOCKED of 1,000 pending rows in id order, every row through
 * the lean PubAck pipeline, DELETE, COMMIT. No per-aggregate order, no leases, no fencing: the
 * least an outbox relay does, measured in the same run to put tx-outbox's cost in proportion.
 *
 * It reads the same rows tx-outbox's relay does (the backlog is written by tx-outbox's own
 * loader, loadOutbox; W2's producers call tx-outbox's `enqueue`), with the relay's session
 * settings (relaySessionSettings, synchronous_commit off as the relay's default), and runs in its
 * own process, measured as the tx-outbox relay is (bench/cpu.ts): that process, its PostgreSQL
 * backend by application_name, nats-server. Timed the same way too: from the moment the process
 * is up until the outbox table is empty.
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { migrate } from '../../src/index.js';
import { relaySessionSettings } from '../../src/relay/session.js';
import { CpuMeter } from '../cpu.js';
import { enqueueLatencyEvent, type LatencySystem } from '../workloads/latency.js';
import { hasExited, type RelayChild, spawnRelayChild, stopRelay, whenStarted } from './child.js';
import { loadOutbox, pendingCount } from './tx-outbox.js';
import type { BenchContext, DrainResult, DrainSystem } from './types.js';

export const LEAN_RELAY = 'lean relay (reference: no per-aggregate order, no leases, no fencing)';

const LEAN_PROCESS = join(dirname(fileURLToPath(import.meta.url)), '..', 'lean-relay-process.ts');

/** `application_name` of the lean relay's connection (bench/cpu.ts). */
export function leanApplicationNameOf(ctx: BenchContext): string {
  return `lean-${ctx.schema}`;
}

/** One lean relay process on the context's schema and stream; it starts claiming at once. */
export function spawnLeanRelay(
  ctx: BenchContext,
  options: { batchSize?: number; idleMs?: number } = {},
): RelayChild {
  const config = {
    databaseUrl: ctx.databaseUrl,
    schema: ctx.schema,
    natsUrl: ctx.natsUrl,
    stream: ctx.stream,
    applicationName: leanApplicationNameOf(ctx),
    batchSize: options.batchSize ?? 1000,
    settings: relaySessionSettings('off'),
    idleMs: options.idleMs ?? 1,
  };
  // TXO_RELAY_NODE_ARGS (e.g. --cpu-prof) applies to both relays' processes.
  return spawnRelayChild(['--import', 'tsx', LEAN_PROCESS], 'TXO_BENCH_LEAN', config);
}

/** A CPU meter over lean relay processes and their backends. */
export function leanCpuMeter(ctx: BenchContext, relays: readonly RelayChild[]): CpuMeter {
  return new CpuMeter(ctx.pool, {
    relayPids: relays.map((r) => r.child.pid!),
    applicationName: leanApplicationNameOf(ctx),
  });
}

export function leanRelaySystem(options: { batchSize?: number } = {}): DrainSystem {
  let relays: RelayChild[] = [];
  return {
    name: LEAN_RELAY,
    load: (ctx, workload) => loadOutbox(ctx, workload),
    async drain(ctx, workload): Promise<DrainResult> {
      relays = Array.from({ length: workload.relays }, () => spawnLeanRelay(ctx, options));
      await Promise.all(relays.map(whenStarted));
      const cpu = leanCpuMeter(ctx, relays);
      await cpu.sample();
      const started = performance.now();
      let polls = 0;
      let left = workload.events;
      let progressAt = started;
      while (left > 0) {
        await new Promise((r) => setTimeout(r, 20));
        const failed = relays.find(hasExited);
        if (failed) {
          throw new Error(
            `a lean relay process exited (${failed.child.exitCode ?? failed.child.signalCode})`,
          );
        }
        const now = await pendingCount(ctx);
        if (now < left) progressAt = performance.now();
        else if (performance.now() - progressAt > 60_000)
          throw new Error(`no progress for 60 s (${now} left)`);
        left = now;
        if (++polls % 5 === 0) await cpu.sample();
      }
      const seconds = (performance.now() - started) / 1000;
      await cpu.sample();
      const peaks = await Promise.all(relays.map(stopRelay));
      relays = [];
      const measured = peaks.filter((p): p is number => p !== undefined);
      return {
        seconds,
        delivered: workload.events,
        cpu: cpu.per1000(workload.events),
        ...(measured.length > 0 ? { peakRssMb: Math.max(...measured) } : {}),
      };
    },
    async teardown() {
      for (const r of relays) r.child.kill('SIGKILL');
      relays = [];
    },
  };
}

/** W2: the lean relay polling the outbox tx-outbox's `enqueue` writes (1 ms sleep between empty claims). */
export function leanRelayLatencySystem(): LatencySystem {
  let relay: RelayChild | undefined;
  return {
    name: LEAN_RELAY,
    async start(ctx) {
      await migrate(ctx.pool, { schema: ctx.schema });
      relay = spawnLeanRelay(ctx);
      await whenStarted(relay);
      return leanCpuMeter(ctx, [relay]);
    },
    // The same business transaction and event as tx-outbox's W2 producers.
    enqueue: (ctx, client, event) => enqueueLatencyEvent(ctx, client, event),
    async stop() {
      if (relay) await stopRelay(relay);
      relay = undefined;
    },
  };
}
