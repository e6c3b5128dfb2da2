/**
 * W1 in pairs: this build's relay against the lean relay (bench/lean-relay-process.ts) and the
 * lean relay sending tx-outbox's headers, and optionally another build's relay, run interleaved
 * on the same backlog shape so each system sees the same machine. For before/after figures of one
 * change without the whole harness.
 *
 *   npx tsx bench/pair.ts                                  # 100,000 events, 5,000 aggregates, 3 runs
 *   TXO_BASE=/path/to/checkout/bench/relay-process.mjs npx tsx bench/pair.ts
 *   EVENTS=10000 AGGREGATES=1000 RUNS=5 npx tsx bench/pair.ts
 *   SOURCE=cdc VIA=wal npx tsx bench/pair.ts               # the CDC relay (VIA=table: table mode)
 *   SOURCE=cdc BACKLOG=at-start npx tsx bench/pair.ts      # the backlog written before the relay starts
 *
 * The other build must be built (`npm run build` in its checkout). Prints one line per run, then
 * per system the median events/s [each run], CPU ms per 1,000 events of the relay process, its
 * PostgreSQL backends and nats-server (bench/cpu.ts), the relay's peak RSS; then each tx-outbox's
 * ratios to the lean relay and to the lean relay with the same headers (drain, relay CPU,
 * PostgreSQL CPU): the first says what the guarantees and the wire format cost together, the
 * second what the guarantees cost.
 */
import pg from 'pg';
import { DATABASE_URL } from './lib.js';
import { LEAN_RELAY, LEAN_RELAY_SAME_HEADERS, leanRelaySystem } from './systems/lean-relay.js';
import { txOutboxSystem } from './systems/tx-outbox.js';
import { type DrainContender, drainPairReport, drainPairs } from './workloads/drain-pair.js';

const events = Number(process.env['EVENTS'] ?? 100_000);
const aggregates = Number(process.env['AGGREGATES'] ?? 5_000);
const runs = Number(process.env['RUNS'] ?? 3);
const base = process.env['TXO_BASE'];
const source = process.env['SOURCE'] === 'cdc' ? 'cdc' : 'poll';
const via = process.env['VIA'] === 'wal' ? 'wal' : 'table';
const backlog = process.env['BACKLOG'] === 'at-start' ? 'at-start' : 'while-streaming';
/** tx-outbox as configured by SOURCE, VIA and BACKLOG (default: the CDC relay streams while the backlog is written). */
const txo = () => (source === 'cdc' ? txOutboxSystem({ source, via, backlog }) : txOutboxSystem());

const contenders: DrainContender[] = [
  ...(base ? [{ name: `tx-outbox (${base})`, system: txo, script: base, txOutbox: true }] : []),
  { name: 'tx-outbox (this build)', system: txo, txOutbox: true },
  { name: LEAN_RELAY, system: () => leanRelaySystem() },
  { name: LEAN_RELAY_SAME_HEADERS, system: () => leanRelaySystem({ headers: 'same' }) },
];

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 12 });
const options = { events, aggregates, runs, contenders };
try {
  const figures = await drainPairs(pool, options);
  console.log(`\n${drainPairReport(figures, options).join('\n')}`);
} finally {
  await pool.end();
}
