/**
 * Inbox overhead: events/s of `inbox.handle` with a one-row business write, next to
 * the same write in a plain transaction, 8 concurrent workers, interleaved rounds.
 *
 *   npm run bench:inbox -- [--seconds 5] [--rounds 3] [--ordering strict]
 */
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { v7 as uuidv7 } from 'uuid';
import { createInbox, type InboxMessage, inTransaction, migrate, type OrderingPolicy } from '../src/index.js';
import { DATABASE_URL, fmt, summarize } from './lib.js';

const { values: args } = parseArgs({
  options: {
    seconds: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '3' },
    ordering: { type: 'string', default: 'strict' },
  },
});
const SECONDS = Number(args.seconds);
const ROUNDS = Number(args.rounds);
const WORKERS = 8;
const schema = `bench_inbox_${randomUUID().slice(0, 8)}`;
const pool = new pg.Pool({ connectionString: DATABASE_URL, max: WORKERS + 2 });
const payload = Buffer.from(JSON.stringify({ sku: 'ABC-123', quantity: 2, note: 'x'.repeat(200) }));

await migrate(pool, { schema });
await pool.query(
  `CREATE TABLE "${schema}".stock (id bigserial PRIMARY KEY, sku text NOT NULL, qty int NOT NULL)`,
);
const inbox = createInbox({ pool, consumer: 'bench', schema, ordering: args.ordering as OrderingPolicy });
const write = (tx: pg.PoolClient) =>
  tx.query({
    name: 'bench_stock',
    text: `INSERT INTO "${schema}".stock (sku, qty) VALUES ($1, $2)`,
    values: ['ABC-123', 2],
  });

async function round(withInbox: boolean): Promise<number> {
  const until = performance.now() + SECONDS * 1000;
  const counts = await Promise.all(
    Array.from({ length: WORKERS }, async (_, w) => {
      let n = 0;
      const aggregate = `w${w}-${randomUUID().slice(0, 6)}`;
      while (performance.now() < until) {
        n += 1;
        if (withInbox) {
          const message: InboxMessage = {
            eventId: uuidv7(), // tx-outbox event ids are time-ordered
            type: 'order.placed',
            aggregateType: 'order',
            aggregateId: aggregate,
            sequence: n,
            schemaVersion: 1,
            payload,
            headers: {},
          };
          const r = await inbox.handle(message, write);
          if (r.status !== 'processed') throw new Error(`unexpected ${r.status}: ${r.reason}`);
        } else {
          await inTransaction(pool, write);
        }
      }
      return n;
    }),
  );
  return counts.reduce((a, b) => a + b, 0) / SECONDS;
}

const plain: number[] = [];
const withInbox: number[] = [];
try {
  for (let r = 0; r < ROUNDS; r++) {
    plain.push(await round(false));
    withInbox.push(await round(true));
  }
} finally {
  await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  await pool.end();
}
const p = summarize(plain);
const i = summarize(withInbox);
console.log(
  `\nInbox overhead: ${WORKERS} workers, ${ROUNDS} interleaved rounds of ${SECONDS} s, ordering ${args.ordering}`,
);
console.log('| handling | events/s | ratio |');
console.log('|---|---|---|');
console.log(`| one-row write, plain transaction | ${fmt(p.median)} [${fmt(p.min)}–${fmt(p.max)}] | 1.00 |`);
console.log(
  `| the same write through inbox.handle | ${fmt(i.median)} [${fmt(i.min)}–${fmt(i.max)}] | ${(i.median / p.median).toFixed(2)} |`,
);
