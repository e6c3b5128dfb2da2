/**
 * W2 steady-state latency: 8 producer connections commit one business row and
 * one event per transaction at a fixed offered rate (open loop: each
 * transaction has a scheduled start); one relay process publishes to
 * JetStream; a JetStream consumer in this process timestamps each receipt.
 * Latency = receipt time - the moment COMMIT returned to the producer.
 */
import { jetstream } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type pg from 'pg';
import { enqueue, migrate } from '../../src/index.js';
import { benchContext, percentile } from '../lib.js';
import { type RelayChild, spawnRelay, stopRelay } from '../systems/tx-outbox.js';

export interface LatencyResult {
  readonly offeredRate: number;
  readonly achievedRate: number;
  readonly received: number;
  readonly p50: number;
  readonly p95: number;
  readonly p99: number;
  readonly max: number;
}

const now = (): number => performance.timeOrigin + performance.now();

export async function latencyRun(
  pool: pg.Pool,
  options: { rate: number; seconds: number; connections?: number },
): Promise<LatencyResult> {
  const connections = options.connections ?? 8;
  const ctx = await benchContext(pool);
  let relay: RelayChild | undefined;
  const nc = await connect({ servers: ctx.natsUrl });
  try {
    await migrate(pool, { schema: ctx.schema });
    await pool.query(
      `CREATE TABLE "${ctx.schema}".orders (id bigserial PRIMARY KEY, payload jsonb NOT NULL)`,
    );
    relay = spawnRelay(ctx, 0, 1000);

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
    await new Promise((r) => setTimeout(r, 1500));

    const committed = new Map<string, number>();
    const payload = { sku: 'ABC-123', quantity: 2, note: 'x'.repeat(200) };
    const perConnection = options.rate / connections;
    const started = now();
    const until = started + options.seconds * 1000;
    await Promise.all(
      Array.from({ length: connections }, async (_, c) => {
        const client = await pool.connect();
        try {
          for (let k = 0; ; k++) {
            const due = started + (k + c / connections) * (1000 / perConnection);
            if (due >= until) break;
            const wait = due - now();
            if (wait > 1) await new Promise((r) => setTimeout(r, wait));
            await client.query('BEGIN');
            await client.query(`INSERT INTO "${ctx.schema}".orders (payload) VALUES ($1)`, [payload]);
            const { eventId } = await enqueue(
              client,
              {
                aggregateType: 'order',
                aggregateId: `c${c}-${k % 100}`,
                type: 'order.placed',
                topic: `${ctx.subjectPrefix}.order.placed`,
                payload,
              },
              { schema: ctx.schema },
            );
            await client.query('COMMIT');
            committed.set(eventId, now());
          }
        } finally {
          client.release();
        }
      }),
    );
    const elapsed = (now() - started) / 1000;
    const deadline = now() + 15_000;
    while (received.size < committed.size && now() < deadline) await new Promise((r) => setTimeout(r, 20));
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
    };
  } finally {
    if (relay) await stopRelay(relay);
    await nc.close();
    await ctx.close();
  }
}
