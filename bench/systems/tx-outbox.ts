/**
 * tx-outbox as the drain benchmarks run it: events written with `enqueue` in
 * business transactions of 1,000, then N relay processes (bench/relay-process.mjs,
 * the built package) drain them into JetStream.
 *
 * `source: 'cdc'`: the CDC relay (createCdcRelay) streams the backlog from the schema's default
 * slot, created before the backlog is written so the slot holds all of it;
 * `via: 'wal'` writes it as WAL messages (no rows: the drain is done when the stream holds
 * every event). The slot and its publication are dropped in teardown.
 *
 * A table-mode backlog that is in the table when the CDC relay starts is, by the handover
 * rule, its polling path's (every aggregate with a row is polled; the stream skips those
 * events): `backlog: 'at-start'` times that (a relay restarting behind). `backlog:
 * 'while-streaming'` times the stream itself: the relay starts on the empty outbox, is
 * SIGSTOPped while the backlog is written (leases and silence timeout long enough that nothing
 * expires meanwhile; PostgreSQL's wal_sender_timeout is 60 s by default) and the timing starts
 * at SIGCONT: a streaming relay catching up 100,000 events behind.
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { resolveCdcNames } from '../../src/cdc/setup.js';
import { enqueue, ensureCdcSlot, inTransaction, migrate } from '../../src/index.js';
import { CpuMeter } from '../cpu.js';
import {
  finalStats,
  type RelayChild,
  type StreamCounter,
  spawnRelayChild,
  stopRelay,
  streamCounter,
  whenStarted,
} from './child.js';
import { dropReplicationObjects } from './peers/shared.js';
import type { BenchContext, DrainResult, DrainSystem, DrainWorkload } from './types.js';
import { benchEvent, inChunks } from './workload.js';

export { type RelayChild, stopRelay, whenStarted } from './child.js';

const RELAY_PROCESS = join(dirname(fileURLToPath(import.meta.url)), '..', 'relay-process.mjs');

/** One relay process (bench/relay-process.mjs, the built package) on the context's schema and stream. */
export function spawnRelay(
  ctx: BenchContext,
  index: number,
  batchSize: number,
  mode?: string,
  history?: boolean,
  extra: {
    readonly source?: RelaySource;
    readonly leaseMs?: number;
    readonly silenceTimeoutMs?: number;
  } = {},
): RelayChild {
  const config = {
    history,
    source: extra.source,
    leaseMs: extra.leaseMs,
    silenceTimeoutMs: extra.silenceTimeoutMs,
    applicationName: applicationNameOf(ctx),
    databaseUrl: ctx.databaseUrl,
    schema: ctx.schema,
    natsUrl: ctx.natsUrl,
    stream: ctx.stream,
    batchSize,
    relayId: `bench-relay-${index}`,
    mode,
  };
  // TXO_BENCH_RELAY_PROCESS: another build's relay-process.mjs (bench/tracing.ts --base).
  return spawnRelayChild(
    [process.env['TXO_BENCH_RELAY_PROCESS'] ?? RELAY_PROCESS],
    'TXO_BENCH_RELAY',
    config,
  );
}

export type RelaySource = 'poll' | 'cdc';
export type ProducerVia = 'table' | 'wal';

/** `application_name` of every connection the relay processes of `ctx` open (bench/cpu.ts). */
export function applicationNameOf(ctx: BenchContext): string {
  return `txo-${ctx.schema}`;
}

/**
 * The CDC relay's slot and publication for `ctx`: the defaults, as the relay resolves them in
 * the context's database (`txo_<database>_<schema>_<hash>`, `txo_<schema>`).
 */
export async function cdcNamesOf(ctx: BenchContext): Promise<{ slot: string; publication: string }> {
  const { slot, publication } = await resolveCdcNames(ctx.pool, { schema: ctx.schema });
  return { slot, publication };
}

export async function pendingCount(ctx: BenchContext): Promise<number> {
  const { rows } = await ctx.pool.query(`SELECT count(*)::int AS n FROM "${ctx.schema}".events`);
  return rows[0].n as number;
}

export async function loadOutbox(
  ctx: BenchContext,
  workload: DrainWorkload,
  options: { source?: RelaySource; via?: ProducerVia } = {},
): Promise<void> {
  await migrate(ctx.pool, { schema: ctx.schema });
  if (options.source === 'cdc' || options.via === 'wal')
    await ensureCdcSlot(ctx.pool, { schema: ctx.schema });
  const via = options.via === 'wal' ? { via: 'wal' as const } : {};
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
      await enqueue(client, events, { schema: ctx.schema, ...via });
    }),
  );
  await ctx.pool.query(`VACUUM ANALYZE "${ctx.schema}".events`);
}

/** How many of the workload's events are delivered so far, as the drain loop polls it. */
async function deliveredSoFar(
  ctx: BenchContext,
  workload: DrainWorkload,
  stream: StreamCounter | undefined,
): Promise<number> {
  // Table mode: done once the relay's outcome statements deleted every row (as the polling
  // relay is timed). WAL mode: there are no rows; done once JetStream stored every event.
  return stream ? await stream.count() : workload.events - (await pendingCount(ctx));
}

/** What the CDC relay's stats say the figure should be read with: reconnects, handovers. */
function cdcNote(relay: RelayChild): string | undefined {
  const cdc = finalStats(relay)?.['cdc'] as { reconnects?: number; handovers?: number } | undefined;
  const parts = [
    cdc?.reconnects ? `${cdc.reconnects} stream reconnect(s)` : '',
    cdc?.handovers ? `${cdc.handovers} handover(s) to the polling path` : '',
  ].filter(Boolean);
  return parts.length > 0 ? parts.join(', ') : undefined;
}

/** Waits (up to 10 s) until the CDC relay's replication connection holds the slot: it streams. */
async function slotActive(ctx: BenchContext): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const { rows } = await ctx.pool.query<{ active: boolean }>(
      'SELECT active FROM pg_replication_slots WHERE slot_name = $1',
      [(await cdcNamesOf(ctx)).slot],
    );
    if (rows[0]?.active) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('the CDC relay did not start streaming within 10 s');
}

/** A paused relay's leases and silence timeout: longer than any backlog load takes. */
const PAUSED_MS = 120_000;

export function txOutboxSystem(
  options: {
    batchSize?: number;
    mode?: 'pipeline' | 'client';
    history?: boolean;
    source?: RelaySource;
    via?: ProducerVia;
    backlog?: 'at-start' | 'while-streaming';
  } = {},
): DrainSystem {
  const batchSize = options.batchSize ?? 1000;
  const source = options.source ?? 'poll';
  const via = options.via ?? 'table';
  const whileStreaming = source === 'cdc' && options.backlog === 'while-streaming';
  let relays: RelayChild[] = [];
  return {
    name:
      source === 'cdc'
        ? `tx-outbox CDC relay (${via === 'wal' ? 'WAL-mode producers' : 'table mode'})`
        : options.mode === 'client'
          ? 'tx-outbox (js.publish client)'
          : options.history
            ? 'tx-outbox (history)'
            : 'tx-outbox',
    async load(ctx, workload) {
      if (whileStreaming) {
        await migrate(ctx.pool, { schema: ctx.schema });
        await ensureCdcSlot(ctx.pool, { schema: ctx.schema });
        const relay = spawnRelay(ctx, 0, batchSize, options.mode, options.history, {
          source,
          leaseMs: PAUSED_MS,
          silenceTimeoutMs: PAUSED_MS,
        });
        relays = [relay];
        await whenStarted(relay);
        await slotActive(ctx);
        await new Promise((r) => setTimeout(r, 200));
        relay.child.kill('SIGSTOP');
      }
      await loadOutbox(ctx, workload, { source, via });
    },
    async drain(ctx, workload): Promise<DrainResult> {
      if (source === 'cdc' && workload.relays > 1) {
        throw new Error('the CDC relay streams one slot from one relay at a time: relays must be 1');
      }
      if (!whileStreaming) {
        relays = Array.from({ length: workload.relays }, (_, i) =>
          spawnRelay(ctx, i, batchSize, options.mode, options.history, { source }),
        );
        // Timed from the moment the relays are up (node's own boot and imports excluded, as
        // the peers run in the harness process): the relays begin claiming right then.
        await Promise.all(relays.map(whenStarted));
      }
      const cpu = new CpuMeter(ctx.pool, {
        relayPids: relays.map((r) => r.child.pid!),
        applicationName: applicationNameOf(ctx),
        ...(source === 'cdc' ? { slot: (await cdcNamesOf(ctx)).slot } : {}),
      });
      const stream = via === 'wal' ? await streamCounter(ctx) : undefined;
      await cpu.sample();
      const started = performance.now();
      if (whileStreaming) relays[0]!.child.kill('SIGCONT');
      let polls = 0;
      try {
        while ((await deliveredSoFar(ctx, workload, stream)) < workload.events) {
          await new Promise((r) => setTimeout(r, 20));
          if (++polls % 5 === 0) await cpu.sample();
        }
      } finally {
        await stream?.close();
      }
      const seconds = (performance.now() - started) / 1000;
      await cpu.sample();
      const peaks = await Promise.all(relays.map(stopRelay));
      const note = source === 'cdc' ? cdcNote(relays[0]!) : undefined;
      relays = [];
      const measured = peaks.filter((p): p is number => p !== undefined);
      return {
        seconds,
        delivered: workload.events,
        cpu: cpu.per1000(workload.events),
        ...(note ? { note } : {}),
        ...(measured.length > 0 ? { peakRssMb: Math.max(...measured) } : {}),
      };
    },
    async teardown(ctx) {
      for (const r of relays) {
        r.child.kill('SIGCONT');
        r.child.kill('SIGKILL');
      }
      relays = [];
      if (source === 'cdc' || via === 'wal') await dropReplicationObjects(ctx, await cdcNamesOf(ctx));
    },
  };
}
