/**
 * W1 with the delivery history on vs off, paired: the same backlog drained by one relay
 * process, alternating off/on so that drift on a shared machine hits both alike.
 *
 *   npm run build && tsx bench/history-pair.ts [--pairs 4] [--events 50000] [--system relay|sql]
 *
 * Prints each pair's events/s and ratio, then the median ratio (target ≥ 0.9).
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { DATABASE_URL, fmt, summarize } from './lib.js';
import { sqlCeilingSystem } from './systems/sql-ceiling.js';
import { txOutboxSystem } from './systems/tx-outbox.js';
import { drainRun } from './workloads/drain.js';

const { values: args } = parseArgs({
  options: {
    pairs: { type: 'string', default: '4' },
    events: { type: 'string', default: '50000' },
    // `sql`: ceiling (a), the relay's claim and outcome statements alone, no broker: the database cost only.
    system: { type: 'string', default: 'relay' },
  },
});
const system = (history: boolean) =>
  args.system === 'sql' ? sqlCeilingSystem({ history }) : txOutboxSystem({ history });
const pairs = Number(args.pairs);
const events = Number(args.events);
const workload = { events, aggregates: Math.max(1, Math.floor(events / 10)), payloadBytes: 300, relays: 1 };
const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 12 });
const ratios: number[] = [];
const off: number[] = [];
const on: number[] = [];
try {
  for (let i = 0; i < pairs; i++) {
    // Alternate which goes first, so neither always runs on a warmer machine.
    const order = i % 2 === 0 ? [false, true] : [true, false];
    const rate: Record<string, number> = {};
    for (const history of order) {
      const run = await drainRun(pool, system(history), workload);
      rate[String(history)] = run.perSecond;
    }
    off.push(rate['false']!);
    on.push(rate['true']!);
    ratios.push(rate['true']! / rate['false']!);
    console.log(
      `pair ${i + 1}: off ${fmt(rate['false']!)} events/s, on ${fmt(rate['true']!)} events/s, ratio ${ratios.at(-1)!.toFixed(2)}`,
    );
  }
  const r = summarize(ratios);
  console.log(
    `${args.system}: ${events} events, ${workload.aggregates} aggregates, ${pairs} pairs: off median ${fmt(summarize(off).median)}, ` +
      `on median ${fmt(summarize(on).median)} events/s; ratio median ${r.median.toFixed(2)} [${r.min.toFixed(2)}–${r.max.toFixed(2)}] (target ≥ 0.9)`,
  );
} finally {
  await pool.end();
}
