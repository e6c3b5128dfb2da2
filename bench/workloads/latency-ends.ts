/**
 * W2's two ends, which the harness runs in processes of their own (bench/latency-producer-process.ts,
 * bench/latency-consumer-process.ts) or, with `placement: 'harness'`, inside itself as it used to:
 *
 * - `produce`: `connections` producer connections committing one business row and one event per
 *   transaction at `rate` (open loop: every transaction has a due time, a late one does not push
 *   the next back). 'steady' pacing: transaction k is due at start + k / rate and runs on
 *   whichever connection is free (a slow commit delays only itself while another connection is
 *   free); 'loose', as the harness used to: transaction k of connection c is due at start +
 *   (k + c / connections) × connections / rate on connection c (a slow commit delays its
 *   connection's next ones, which then run back to back), and no timer is set for a wait of
 *   1 ms or less. The commit time of each event is read right after its COMMIT returns.
 * - `consume`: a JetStream ordered consumer on the run's stream that reads the receipt time of
 *   each message (by its `Nats-Msg-Id`, which every system sends with the event id).
 *
 * Both ends read one clock, CLOCK_MONOTONIC (`process.hrtime`), the same in every process of
 * the machine, so latency = receipt - commit holds across processes.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { jetstream } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import pg from 'pg';

/** The machine's monotonic clock, ms (the same in every process). */
export const monotonicMs = (): number => Number(process.hrtime.bigint()) / 1e6;

/** One event a W2 producer writes in its business transaction. */
export interface LatencyEvent {
  readonly aggregateId: string;
  /** The aggregate's sequence as this producer counts it (for peers without one of their own). */
  readonly sequence: number;
  readonly topic: string;
  readonly payload: Readonly<Record<string, unknown>>;
}

/** What a producer knows of the run. */
export interface ProducerContext {
  readonly schema: string;
  readonly subjectPrefix: string;
  readonly stream: string;
}

/** Writes one event in the transaction open on `client`; the event id (sent as `Nats-Msg-Id`). */
export type LatencyEnqueue = (client: pg.PoolClient, event: LatencyEvent) => Promise<string>;

/**
 * Where a system's producer write lives, so that a producer process can load it: the module (a
 * path under the repository) and the name of its export, a factory `(ctx, args) => enqueue`.
 */
export interface ProducerSpec {
  readonly module: string;
  readonly factory: string;
  readonly args?: unknown;
}

export interface ProduceOptions {
  readonly databaseUrl: string;
  /** The repository's root (ProducerSpec.module is under it). */
  readonly root: string;
  readonly ctx: ProducerContext;
  readonly producer: ProducerSpec;
  readonly rate: number;
  readonly seconds: number;
  readonly connections: number;
  /** See the top of this file. */
  readonly pacing: 'steady' | 'loose';
}

/** How late transactions started against their schedule, ms. */
export interface Lateness {
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
}

export interface Produced {
  /** [event id, commit time (monotonicMs), aggregate id] of every committed transaction. */
  readonly committed: Array<[string, number, string]>;
  readonly seconds: number;
  readonly lateness: Lateness;
  /** p99 of the event loop's delay in the producing process, ms. */
  readonly loopDelayP99: number;
}

export async function loadEnqueue(
  root: string,
  ctx: ProducerContext,
  spec: ProducerSpec,
): Promise<LatencyEnqueue> {
  const module = (await import(pathToFileURL(`${root}/${spec.module}`).href)) as Record<string, unknown>;
  const factory = module[spec.factory] as
    | ((ctx: ProducerContext, args: unknown) => LatencyEnqueue | Promise<LatencyEnqueue>)
    | undefined;
  if (typeof factory !== 'function') throw new Error(`${spec.module} has no export ${spec.factory}`);
  return await factory(ctx, spec.args);
}

function lateness(sorted: readonly number[]): Lateness {
  const at = (p: number): number =>
    sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
  return { p50: at(50), p99: at(99), max: sorted[sorted.length - 1] ?? 0 };
}

/**
 * The producers, on a pool of their own. `ready` (if given) is awaited once every connection is
 * open, before the schedule starts.
 */
export async function produce(options: ProduceOptions, ready?: () => Promise<void>): Promise<Produced> {
  const { connections, ctx } = options;
  const enqueue = await loadEnqueue(options.root, ctx, options.producer);
  const pool = new pg.Pool({ connectionString: options.databaseUrl, max: connections });
  const clients = await Promise.all(Array.from({ length: connections }, () => pool.connect()));
  const delay = monitorEventLoopDelay({ resolution: 1 });
  try {
    if (ready) await ready();
    const payload = { sku: 'ABC-123', quantity: 2, note: 'x'.repeat(200) };
    const committed: Array<[string, number, string]> = [];
    const late: number[] = [];
    const orders = `INSERT INTO "${ctx.schema}".orders (payload) VALUES ($1)`;
    const topic = `${ctx.subjectPrefix}.order.placed`;
    /** One transaction: 800 aggregates, `c<0-7>-<0-99>`, as W2 always wrote them. */
    const transaction = async (client: pg.PoolClient, c: number, k: number, due: number): Promise<void> => {
      late.push(monotonicMs() - due);
      const aggregateId = `c${c}-${k % 100}`;
      await client.query('BEGIN');
      await client.query(orders, [payload]);
      const eventId = await enqueue(client, {
        aggregateId,
        sequence: Math.floor(k / 100) + 1,
        topic,
        payload,
      });
      await client.query('COMMIT');
      committed.push([eventId, monotonicMs(), aggregateId]);
    };
    delay.enable();
    const started = monotonicMs();
    const until = started + options.seconds * 1000;
    if (options.pacing === 'loose') {
      const period = (1000 * connections) / options.rate;
      await Promise.all(
        clients.map(async (client, c) => {
          for (let k = 0; ; k++) {
            const due = started + (k + c / connections) * period;
            if (due >= until) break;
            const wait = due - monotonicMs();
            if (wait > 1) await new Promise((r) => setTimeout(r, wait));
            await transaction(client, c, k, due);
          }
        }),
      );
    } else {
      const idle = [...clients];
      const waiting: Array<(client: pg.PoolClient) => void> = [];
      const release = (client: pg.PoolClient): void => {
        const next = waiting.shift();
        if (next) next(client);
        else idle.push(client);
      };
      const running = new Set<Promise<void>>();
      let failure: unknown;
      for (let n = 0; ; n++) {
        const due = started + (n * 1000) / options.rate;
        if (due >= until || failure !== undefined) break;
        const wait = due - monotonicMs();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        const client = idle.pop() ?? (await new Promise<pg.PoolClient>((r) => waiting.push(r)));
        const run: Promise<void> = transaction(client, n % connections, Math.floor(n / connections), due)
          .catch((error: unknown) => {
            failure ??= error;
          })
          .finally(() => {
            running.delete(run);
            release(client);
          });
        running.add(run);
      }
      await Promise.all(running);
      if (failure !== undefined) throw failure;
    }
    const seconds = (monotonicMs() - started) / 1000;
    delay.disable();
    late.sort((a, b) => a - b);
    return {
      committed,
      seconds,
      lateness: lateness(late),
      loopDelayP99: delay.percentile(99) / 1e6,
    };
  } finally {
    for (const client of clients) client.release();
    await pool.end();
  }
}

/** A running consumer: receipt times by event id. */
export interface Consuming {
  readonly received: Map<string, number>;
  /** Stops it; p99 of the event loop's delay in its process while it ran, ms. */
  stop(): Promise<{ loopDelayP99: number }>;
}

/** Reads every message of `stream` from now on with an ordered consumer on `nc`. */
export async function consume(nc: NatsConnection, stream: string): Promise<Consuming> {
  const received = new Map<string, number>();
  const consumer = await jetstream(nc).consumers.get(stream);
  const messages = await consumer.consume({ max_messages: 5000 });
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  const consuming = (async () => {
    for await (const m of messages) {
      const t = monotonicMs();
      const id = m.headers?.get('Nats-Msg-Id');
      if (id && !received.has(id)) received.set(id, t);
    }
  })();
  return {
    received,
    async stop() {
      messages.stop();
      await consuming.catch(() => undefined);
      delay.disable();
      return { loopDelayP99: delay.percentile(99) / 1e6 };
    },
  };
}
