/**
 * Smoke run of the peer systems: each gets a fresh schema and stream, loads a small backlog,
 * drains it, and the stream is read back to check the count and per-aggregate order.
 *
 *   npx tsx bench/systems/peers/smoke.ts [--events 5000] [--aggregates 500] [--naive-events 300] [name-filter…]
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import type { BenchContext, DrainSystem } from '../types.js';
import { graphileWorkerSystem } from './graphile-worker.js';
import { naiveLoopSystem } from './naive-loop.js';
import { pgBossSystem } from './pg-boss.js';
import {
  pgTransactionalOutboxPollingSystem,
  pgTransactionalOutboxReplicationSystem,
} from './pg-transactional-outbox.js';

const { values: args, positionals: filters } = parseArgs({
  allowPositionals: true,
  options: {
    events: { type: 'string', default: '5000' },
    aggregates: { type: 'string', default: '500' },
    'naive-events': { type: 'string', default: '300' },
  },
});
const DATABASE_URL = process.env['DATABASE_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
const NATS_URL = process.env['NATS_URL'] ?? 'nats://127.0.0.1:4222';

/** Each system, its backlog and whether it claims per-aggregate order. */
const systems: { system: DrainSystem; events: number; ordered: boolean }[] = [
  { system: naiveLoopSystem(), events: Number(args['naive-events']), ordered: true },
  { system: graphileWorkerSystem(), events: Number(args.events), ordered: true },
  { system: graphileWorkerSystem({ localQueue: true }), events: Number(args.events), ordered: false },
  {
    system: graphileWorkerSystem({ queuePerAggregate: false }),
    events: Number(args.events),
    ordered: false,
  },
  { system: pgBossSystem(), events: Number(args.events), ordered: false },
  { system: pgTransactionalOutboxPollingSystem(), events: Number(args.events), ordered: true },
  { system: pgTransactionalOutboxReplicationSystem(), events: Number(args.events), ordered: true },
].filter(({ system }) => filters.length === 0 || filters.some((f) => system.name.includes(f)));

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 10 });
const nc = await connect({ servers: NATS_URL });
const jsm = await jetstreamManager(nc);

/** Reads the stream back: message count, distinct events and per-aggregate order violations. */
async function readBack(stream: string): Promise<{ messages: number; distinct: number; outOfOrder: number }> {
  const info = await jsm.streams.info(stream);
  const messages = info.state.messages;
  const last = new Map<string, number>();
  const seen = new Set<number>();
  let outOfOrder = 0;
  if (messages > 0) {
    const consumer = await jetstream(nc).consumers.get(stream);
    const iter = await consumer.consume();
    for await (const m of iter) {
      const { i, orderId } = m.json<{ i: number; orderId: string }>();
      if ((last.get(orderId) ?? -1) > i) outOfOrder++;
      last.set(orderId, Math.max(i, last.get(orderId) ?? -1));
      seen.add(i);
      if (m.seq >= info.state.last_seq) break;
    }
    await iter.close();
  }
  return { messages, distinct: seen.size, outOfOrder };
}

const aggregates = Number(args.aggregates);
console.log('| system | events | events/s | delivered | in stream | per-aggregate order |');
console.log('|---|---|---|---|---|---|');
for (const { system, events, ordered } of systems) {
  const tag = randomBytes(4).toString('hex');
  const ctx: BenchContext = {
    databaseUrl: DATABASE_URL,
    natsUrl: NATS_URL,
    schema: `peer_smoke_${tag}`,
    stream: `PEER_SMOKE_${tag}`,
    subjectPrefix: `peersmoke${tag}`,
    pool,
  };
  const workload = { events, aggregates, payloadBytes: 300, relays: 1 };
  await pool.query(`CREATE SCHEMA ${ctx.schema}`);
  await jsm.streams.add({ name: ctx.stream, subjects: [`${ctx.subjectPrefix}.>`] });
  try {
    await system.load(ctx, workload);
    const result = await system.drain(ctx, workload);
    await system.teardown(ctx);
    const back = await readBack(ctx.stream);
    const order = back.outOfOrder === 0 ? 'held' : `${back.outOfOrder} out of order`;
    console.log(
      `| ${system.name} | ${events} | ${Math.round(result.delivered / result.seconds)} | ${result.delivered} | ` +
        `${back.messages} (${back.distinct} distinct) | ${order}${ordered ? '' : ' (not claimed)'} |`,
    );
  } catch (error) {
    await system.teardown(ctx).catch(() => undefined);
    const message = error instanceof Error ? error.message : String(error);
    console.log(
      `| ${system.name} | ${events} | ${message.startsWith('SKIP:') ? message : `FAILED: ${message}`} | | | |`,
    );
  } finally {
    await jsm.streams.delete(ctx.stream).catch(() => undefined);
    await pool.query(`DROP SCHEMA IF EXISTS ${ctx.schema} CASCADE`);
  }
}
await nc.close();
await pool.end();
