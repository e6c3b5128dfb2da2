/** Shared pieces of the benchmark harness: contexts, streams, statistics, machine facts. */
import { randomBytes } from 'node:crypto';
import { cpus, totalmem } from 'node:os';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type pg from 'pg';
import { percentDecode } from '../src/envelope/percent.js';
import type { BenchContext } from './systems/types.js';

export const DATABASE_URL = process.env['DATABASE_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
export const NATS_URL = process.env['NATS_URL'] ?? 'nats://127.0.0.1:4222';

export interface Summary {
  readonly median: number;
  readonly min: number;
  readonly max: number;
  readonly runs: number;
}

export function summarize(values: readonly number[]): Summary {
  const sorted = [...values].sort((a, b) => a - b);
  return {
    median: sorted[Math.floor((sorted.length - 1) / 2)]!,
    min: sorted[0]!,
    max: sorted[sorted.length - 1]!,
    runs: sorted.length,
  };
}

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** A fresh schema and JetStream stream for one run; dropped and deleted by `close`. */
export async function benchContext(pool: pg.Pool): Promise<BenchContext & { close(): Promise<void> }> {
  const tag = randomBytes(4).toString('hex');
  const schema = `bench_${tag}`;
  const stream = `TXO_BENCH_${tag}`;
  const subjectPrefix = `bench${tag}`;
  await pool.query(`CREATE SCHEMA "${schema}"`);
  const nc = await connect({ servers: NATS_URL });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: stream, subjects: [`${subjectPrefix}.>`] });
  return {
    databaseUrl: DATABASE_URL,
    natsUrl: NATS_URL,
    schema,
    stream,
    subjectPrefix,
    pool,
    async close() {
      await jsm.streams.delete(stream).catch(() => undefined);
      await nc.close();
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    },
  };
}

/** Stream messages in order: (aggregate id, sequence) from the envelope headers. */
export async function streamOrderViolations(
  stream: string,
): Promise<{ messages: number; violations: number }> {
  const nc = await connect({ servers: NATS_URL });
  try {
    const jsm = await jetstreamManager(nc);
    const total = (await jsm.streams.info(stream)).state.messages;
    if (total === 0) return { messages: 0, violations: 0 };
    const consumer = await jetstream(nc).consumers.get(stream);
    const iter = await consumer.consume({ max_messages: 2000 });
    const last = new Map<string, number>();
    let seen = 0;
    let violations = 0;
    for await (const m of iter) {
      const aggregate = percentDecode(m.headers?.get('ce-aggregateid') ?? '');
      const sequence = Number(m.headers?.get('ce-sequence'));
      const prev = last.get(aggregate);
      if (prev !== undefined && sequence <= prev) violations += 1;
      last.set(aggregate, Math.max(prev ?? 0, sequence));
      seen += 1;
      if (seen >= total) break;
    }
    return { messages: total, violations };
  } finally {
    await nc.close();
  }
}

export async function machine(pool: pg.Pool): Promise<Record<string, unknown>> {
  const { rows } = await pool.query(`SELECT version() AS version,
      current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS synchronous_commit,
      current_setting('shared_buffers') AS shared_buffers, current_setting('wal_level') AS wal_level,
      current_setting('max_connections') AS max_connections`);
  const nc = await connect({ servers: NATS_URL });
  const natsVersion = nc.info?.version;
  await nc.close();
  return {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    node: process.version,
    postgres: rows[0],
    nats: natsVersion,
  };
}

export const fmt = (n: number): string =>
  Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : 'n/a';

export const fmtMs = (n: number): string => (Number.isFinite(n) ? n.toFixed(n < 10 ? 2 : 1) : 'n/a');
