/**
 * Producer overhead: transactions per second of a one-row business transaction
 * alone, with one `enqueue` (no wake-up), and with one `enqueue` plus NOTIFY,
 * from 8 connections, interleaved rounds in one run.
 *
 *   npm run bench:producer -- [--seconds 5] [--rounds 3] [--connections 8]
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { enqueue, migrate } from '../src/index.js';

const { values: args } = parseArgs({
  options: {
    seconds: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '3' },
    connections: { type: 'string', default: '8' },
  },
});
const SECONDS = Number(args.seconds);
const ROUNDS = Number(args.rounds);
const CONNECTIONS = Number(args.connections);
const DATABASE_URL = process.env['DATABASE_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `benchp_${randomBytes(4).toString('hex')}`;
const pool = new pg.Pool({ connectionString: DATABASE_URL, max: CONNECTIONS });
const payload = { sku: 'ABC-123', quantity: 2, note: 'x'.repeat(200) };

type Variant =
  | 'business only'
  | 'business + plain INSERT'
  | 'business + enqueue'
  | 'business + enqueue + NOTIFY';

async function worker(variant: Variant, until: number, id: number): Promise<number> {
  const client = await pool.connect();
  let n = 0;
  try {
    while (performance.now() < until) {
      await client.query('BEGIN');
      await client.query(`INSERT INTO "${schema}".orders (payload) VALUES ($1)`, [payload]);
      if (variant === 'business + plain INSERT') {
        await client.query(`INSERT INTO "${schema}".plain_outbox (topic, payload) VALUES ($1, $2)`, [
          'order.placed',
          payload,
        ]);
      } else if (variant !== 'business only') {
        await enqueue(
          client,
          { aggregateType: 'order', aggregateId: `w${id}-${n % 500}`, type: 'order.placed', payload },
          { schema, notify: variant === 'business + enqueue + NOTIFY' },
        );
      }
      await client.query('COMMIT');
      n += 1;
    }
  } finally {
    client.release();
  }
  return n;
}

async function round(variant: Variant): Promise<number> {
  const until = performance.now() + SECONDS * 1000;
  const counts = await Promise.all(Array.from({ length: CONNECTIONS }, (_, i) => worker(variant, until, i)));
  return counts.reduce((a, b) => a + b, 0) / SECONDS;
}

await migrate(pool, { schema });
await pool.query(`CREATE TABLE "${schema}".orders (id bigserial PRIMARY KEY, payload jsonb NOT NULL)`);
// The outbox table of the tutorials: one insert, one index.
await pool.query(
  `CREATE TABLE "${schema}".plain_outbox (id bigserial PRIMARY KEY, topic text NOT NULL, payload jsonb NOT NULL,
     published boolean NOT NULL DEFAULT false, created_at timestamptz NOT NULL DEFAULT now())`,
);
const variants: Variant[] = [
  'business only',
  'business + plain INSERT',
  'business + enqueue',
  'business + enqueue + NOTIFY',
];
const tps = Object.fromEntries(variants.map((v) => [v, [] as number[]])) as unknown as Record<
  Variant,
  number[]
>;
try {
  for (let r = 0; r < ROUNDS; r++) for (const v of variants) tps[v].push(await round(v));
} finally {
  await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  await pool.end();
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const base = median(tps['business only']);
console.log(
  `\nProducer TPS, ${CONNECTIONS} connections, ${ROUNDS} interleaved rounds of ${SECONDS} s (median [min-max])`,
);
console.log('| variant | TPS | ratio to business only |');
console.log('|---|---|---|');
for (const v of variants) {
  const xs = tps[v];
  console.log(
    `| ${v} | ${Math.round(median(xs))} [${Math.round(Math.min(...xs))}-${Math.round(Math.max(...xs))}] | ${(median(xs) / base).toFixed(2)} |`,
  );
}
