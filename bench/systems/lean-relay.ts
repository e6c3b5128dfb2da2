/**
 * The lean reference relay (bench/lean-relay-process.ts) as a W1 drain system and a W2 latency
 * system: SELECT … FOR UPDATE SKIP LOCKED of 1,000 pending rows in id order, the batch written to
 * NATS in 64 KB writes with one `Nats-Msg-Id` header each, every PubAck awaited, DELETE, COMMIT. No
 * per-aggregate order, no leases, no fencing: the least an outbox relay does, measured in the
 * same run to put tx-outbox's cost in proportion. Its variant `headers: 'same'` sends the header
 * block tx-outbox's NATS publisher sends (the CloudEvents binding, Nats-Msg-Id, the expected
 * stream), so that the ratios tell what the guarantees cost from what the wire format costs.
 *
 * It reads the same rows tx-outbox's relay does (the backlog is written by tx-outbox's own
 * loader, loadOutbox; W2's producers call tx-outbox's `enqueue`), with the relay's session
 * settings (relaySessionSettings, synchronous_commit off as the relay's default), and runs in its
 * own process, measured as the tx-outbox relay is (bench/cpu.ts): that process, its PostgreSQL
 * backend by application_name, nats-server. Timed the same way too: from the moment the process
 * is up until the outbox table is empty.
 */
import { migrate } from '../../src/index.js';
import { relaySessionSettings } from '../../src/relay/session.js';
import { CpuMeter } from '../cpu.js';
import { type LatencySystem, txOutboxProducer } from '../workloads/latency.js';
import {
  compiledScript,
  hasExited,
  type RelayChild,
  spawnRelayChild,
  stopRelay,
  whenStarted,
} from './child.js';
import type { LeanHeaders } from './lean-publish.js';
import { loadOutbox, pendingCount } from './tx-outbox.js';
import type { BenchContext, DrainResult, DrainSystem } from './types.js';

export const LEAN_RELAY = 'lean relay (reference: no per-aggregate order, no leases, no fencing)';
export const LEAN_RELAY_SAME_HEADERS =
  "lean relay, tx-outbox's headers (CloudEvents binding, Nats-Msg-Id, expected stream)";

/** The name of the lean relay with `headers`. */
export function leanRelayName(headers: LeanHeaders = 'msg-id'): string {
  return headers === 'same' ? LEAN_RELAY_SAME_HEADERS : LEAN_RELAY;
}

/** `application_name` of the lean relay's connection (bench/cpu.ts). */
export function leanApplicationNameOf(ctx: BenchContext): string {
  return `lean-${ctx.schema}`;
}

/** One lean relay process on the context's schema and stream; it starts claiming at once. */
export function spawnLeanRelay(
  ctx: BenchContext,
  options: { batchSize?: number; idleMs?: number; headers?: LeanHeaders } = {},
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
    headers: options.headers ?? 'msg-id',
  };
  // TXO_RELAY_NODE_ARGS (e.g. --cpu-prof) applies to both relays' processes.
  // Compiled: no TypeScript loader in the measured process. TXO_BENCH_LEAN_PROCESS: another
  // build's compiled lean relay (.tmp/bench/bench_lean-relay-process.mjs), to compare two.
  const script = process.env['TXO_BENCH_LEAN_PROCESS'] ?? compiledScript('bench/lean-relay-process.ts');
  return spawnRelayChild([script], 'TXO_BENCH_LEAN', config);
}

/** A CPU meter over lean relay processes and their backends. */
export function leanCpuMeter(ctx: BenchContext, relays: readonly RelayChild[]): CpuMeter {
  return new CpuMeter(ctx.pool, {
    relayPids: relays.map((r) => r.child.pid!),
    applicationName: leanApplicationNameOf(ctx),
  });
}

export function leanRelaySystem(options: { batchSize?: number; headers?: LeanHeaders } = {}): DrainSystem {
  let relays: RelayChild[] = [];
  return {
    name: leanRelayName(options.headers),
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
export function leanRelayLatencySystem(options: { headers?: LeanHeaders } = {}): LatencySystem {
  let relay: RelayChild | undefined;
  return {
    name: leanRelayName(options.headers),
    async start(ctx) {
      await migrate(ctx.pool, { schema: ctx.schema });
      relay = spawnLeanRelay(ctx, options.headers ? { headers: options.headers } : {});
      await whenStarted(relay);
      return leanCpuMeter(ctx, [relay]);
    },
    // The same business transaction and event as tx-outbox's W2 producers.
    producer: txOutboxProducer(),
    async stop() {
      if (relay) await stopRelay(relay);
      relay = undefined;
    },
  };
}
