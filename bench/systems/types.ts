/**
 * The shape every system in the drain benchmarks (W1, W4, W5) implements, so
 * tx-outbox, its peers and the physical ceilings run the same workload in the
 * same run. A system owns its tables (in `ctx.schema`, a fresh schema per
 * run), its workers and its broker connections; it publishes to NATS JetStream
 * subjects under `ctx.subjectPrefix` (the stream `ctx.stream` captures them).
 */
import type pg from 'pg';

/** CPU ms per 1,000 events by process; undefined where it could not be read. */
export interface CpuPer1000 {
  readonly relay?: number;
  readonly postgres?: number;
  readonly nats?: number;
}

export interface BenchContext {
  readonly databaseUrl: string;
  readonly natsUrl: string;
  /** A fresh schema for this run; the harness creates it before `load` and drops it after `teardown`. */
  readonly schema: string;
  /** The JetStream stream (already created, capturing `${subjectPrefix}.>`) to publish into. */
  readonly stream: string;
  readonly subjectPrefix: string;
  /** A pool on `databaseUrl` (max 10) for setup work; systems may open their own. */
  readonly pool: pg.Pool;
}

export interface DrainWorkload {
  /** Events to load before draining. */
  readonly events: number;
  /** Events are spread over this many aggregates: event i belongs to aggregate i mod aggregates. */
  readonly aggregates: number;
  /** Approximate size of each JSON payload, in bytes. */
  readonly payloadBytes: number;
  /** Relay/worker processes to run side by side (W5); systems that cannot scale out may refuse > 1. */
  readonly relays: number;
}

export interface DrainResult {
  /** Seconds from starting the workers until the broker acknowledged the last event. */
  readonly seconds: number;
  /** Events acknowledged by the broker (must equal the workload's count). */
  readonly delivered: number;
  /** Peak resident set size of the relay/worker process(es), MB, when measured in a child process. */
  readonly peakRssMb?: number;
  /** CPU ms per 1,000 events by process over the timed part (bench/cpu.ts), when measured. */
  readonly cpu?: CpuPer1000;
  /** Something that happened during the run that the figure should be read with (e.g. a reconnect). */
  readonly note?: string;
}

export interface DrainSystem {
  readonly name: string;
  /** Loads the backlog the way the system's producers would write it (business transactions). */
  load(ctx: BenchContext, workload: DrainWorkload): Promise<void>;
  /** Starts the workers on the loaded backlog and resolves once every event is acknowledged by the broker. */
  drain(ctx: BenchContext, workload: DrainWorkload): Promise<DrainResult>;
  /** Stops everything the system started (the harness drops the schema and the stream). */
  teardown(ctx: BenchContext): Promise<void>;
}
