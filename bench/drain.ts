/**
 * Backlog drain, tx-outbox relay vs the naive polling loop blog posts write
 * (select 100 every 500 ms, publish one by one, update one by one), both into
 * the same NATS JetStream server from the same PostgreSQL, in one run.
 *
 *   npm run bench:drain -- [--events 100000] [--naive-events 2000] [--runs 3]
 *
 * Prints a table and writes bench/results/drain-<timestamp>.json.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { parseArgs } from 'node:util';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, headers } from '@nats-io/transport-node';
import pg from 'pg';
import { createRelay, enqueue, migrate } from '../src/index.js';
import { natsPublisher } from '../src/publishers/nats.js';

const { values: args } = parseArgs({
  options: {
    events: { type: 'string', default: '100000' },
    'naive-events': { type: 'string', default: '2000' },
    aggregates: { type: 'string', default: '5000' },
    runs: { type: 'string', default: '1' },
  },
});
const EVENTS = Number(args.events);
const NAIVE_EVENTS = Number(args['naive-events']);
const AGGREGATES = Number(args.aggregates);
const RUNS = Number(args.runs);
const DATABASE_URL = process.env['DATABASE_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
const NATS_URL = process.env['NATS_URL'] ?? 'nats://127.0.0.1:4222';
const FILLER = 'x'.repeat(240);

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 8 });

async function withStream<T>(fn: (stream: string, subject: string) => Promise<T>): Promise<T> {
  const tag = randomBytes(4).toString('hex');
  const stream = `TXO_BENCH_${tag}`;
  const subject = `bench${tag}`;
  const nc = await connect({ servers: NATS_URL });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: stream, subjects: [`${subject}.>`] });
  try {
    return await fn(stream, subject);
  } finally {
    await jsm.streams.delete(stream).catch(() => undefined);
    await nc.close();
  }
}

async function txOutbox(): Promise<number> {
  const schema = `bench_${randomBytes(4).toString('hex')}`;
  await migrate(pool, { schema });
  try {
    return await withStream(async (stream, subject) => {
      for (let start = 0; start < EVENTS; start += 1000) {
        const client = await pool.connect();
        try {
          await client.query('BEGIN');
          const events = Array.from({ length: Math.min(1000, EVENTS - start) }, (_, k) => ({
            aggregateType: 'order',
            aggregateId: `o${(start + k) % AGGREGATES}`,
            type: 'order.changed',
            topic: `${subject}.order`,
            payload: { i: start + k, filler: FILLER },
          }));
          await enqueue(client, events, { schema, notify: false });
          await client.query('COMMIT');
        } finally {
          client.release();
        }
      }
      await pool.query(`VACUUM ANALYZE "${schema}".events`);
      const publisher = natsPublisher({ servers: NATS_URL, stream });
      const relay = createRelay({ pool, publisher, schema, batchSize: 1000 });
      const started = performance.now();
      await relay.start();
      for (;;) {
        const { rows } = await pool.query(`SELECT count(*)::int AS n FROM "${schema}".events`);
        if (rows[0].n === 0) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      const seconds = (performance.now() - started) / 1000;
      await relay.stop();
      await publisher.close();
      return EVENTS / seconds;
    });
  } finally {
    await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  }
}

/** The loop as tutorials write it. */
async function naiveLoop(): Promise<number> {
  const table = `naive_${randomBytes(4).toString('hex')}`;
  await pool.query(`CREATE TABLE ${table} (
    id bigserial PRIMARY KEY, topic text NOT NULL, payload jsonb NOT NULL,
    published boolean NOT NULL DEFAULT false, created_at timestamptz NOT NULL DEFAULT now())`);
  try {
    return await withStream(async (_stream, subject) => {
      for (let start = 0; start < NAIVE_EVENTS; start += 1000) {
        const n = Math.min(1000, NAIVE_EVENTS - start);
        await pool.query(
          `INSERT INTO ${table} (topic, payload) SELECT $1, jsonb_build_object('i', i, 'filler', $2::text) FROM generate_series(1, $3) i`,
          [`${subject}.order`, FILLER, n],
        );
      }
      const nc = await connect({ servers: NATS_URL });
      const js = jetstream(nc);
      const started = performance.now();
      let done = 0;
      while (done < NAIVE_EVENTS) {
        const tick = performance.now();
        const { rows } = await pool.query(
          `SELECT id, topic, payload::text AS payload FROM ${table} WHERE NOT published ORDER BY id LIMIT 100`,
        );
        for (const row of rows) {
          const h = headers();
          h.set('Nats-Msg-Id', String(row.id));
          await js.publish(row.topic, row.payload, { headers: h });
          await pool.query(`UPDATE ${table} SET published = true WHERE id = $1`, [row.id]);
          done += 1;
        }
        const wait = 500 - (performance.now() - tick);
        if (wait > 0 && done < NAIVE_EVENTS) await new Promise((r) => setTimeout(r, wait));
      }
      const seconds = (performance.now() - started) / 1000;
      await nc.close();
      return NAIVE_EVENTS / seconds;
    });
  } finally {
    await pool.query(`DROP TABLE ${table}`);
  }
}

function summary(values: number[]): { median: number; min: number; max: number } {
  const sorted = [...values].sort((a, b) => a - b);
  return { median: sorted[Math.floor(sorted.length / 2)]!, min: sorted[0]!, max: sorted[sorted.length - 1]! };
}

const results: Record<string, number[]> = { 'tx-outbox relay': [], 'naive loop': [] };
for (let run = 0; run < RUNS; run++) {
  results['tx-outbox relay']!.push(await txOutbox());
  results['naive loop']!.push(await naiveLoop());
}
const { rows: settings } = await pool.query(
  `SELECT version() AS version, current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS synchronous_commit,
          current_setting('shared_buffers') AS shared_buffers`,
);
await pool.end();

const relay = summary(results['tx-outbox relay']!);
const naive = summary(results['naive loop']!);
const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
console.log(`\nBacklog drain into NATS JetStream (${RUNS} run(s); events/s, median [min-max])`);
console.log('| system | backlog | events/s | ratio |');
console.log('|---|---|---|---|');
console.log(
  `| tx-outbox relay | ${EVENTS} | ${fmt(relay.median)} [${fmt(relay.min)}-${fmt(relay.max)}] | ${(relay.median / naive.median).toFixed(1)}x |`,
);
console.log(
  `| naive loop | ${NAIVE_EVENTS} | ${fmt(naive.median)} [${fmt(naive.min)}-${fmt(naive.max)}] | 1.0x |`,
);

mkdirSync('bench/results', { recursive: true });
const file = `bench/results/drain-${new Date().toISOString().replace(/[:.]/g, '-')}.json`;
writeFileSync(
  file,
  `${JSON.stringify(
    {
      workload: 'drain',
      events: EVENTS,
      naiveEvents: NAIVE_EVENTS,
      aggregates: AGGREGATES,
      runs: RUNS,
      results,
      machine: {
        cpus: cpus().length,
        memoryGiB: Math.round(totalmem() / 2 ** 30),
        node: process.version,
        postgres: settings[0],
      },
    },
    null,
    2,
  )}\n`,
);
console.log(`\nwritten ${file}`);
