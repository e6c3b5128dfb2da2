/**
 * Where W3's producer cost goes, part by part: the PostgreSQL backend's CPU per transaction
 * (`/proc/<pid>/schedstat`, nanoseconds on CPU) for a business INSERT plus one statement, each
 * statement adding one part to the one before: a bare INSERT of the payload; the event row as a
 * plain INSERT into a copy of events with its primary key alone, then with the pending index,
 * the check (events_deliverable_check) and the dead-count triggers (the real table); the
 * caller-version statement without and with the NOTIFY check; the sequence row's UPDATE alone
 * (without and with the chain columns); the default statement without and with the NOTIFY
 * check; the WAL-mode message alone, signed (caller version) and with the sequence row.
 *
 * One connection, prepared statements, `--tx` transactions per part and round, rounds
 * interleaved; prints the minimum and median per part (the minimum is the least disturbed on a
 * shared machine). PostgreSQL at DATABASE_URL must run on this machine (it reads /proc).
 *
 *   npx tsx bench/producer-parts.ts [--tx 1000] [--rounds 9] [--only bare,table] [--schema bench_producer_parts]
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { enqueueStatements, wakeChannel } from '../src/producer/enqueue-sql.js';
import { walStatements } from '../src/producer/enqueue-wal-sql.js';
import { encodeWalBody, eventsPrefix } from '../src/producer/wal-message.js';
import { migrate } from '../src/schema/migrate.js';
import { DATABASE_URL } from './lib.js';
import { aggregateLiterals, BENCH_PAYLOAD_JSON, benchEvent, eventLiterals } from './workloads/pgbench-wal.js';

const { values: args } = parseArgs({
  options: {
    tx: { type: 'string', default: '1000' },
    rounds: { type: 'string', default: '9' },
    only: { type: 'string' },
    schema: { type: 'string', default: 'bench_producer_parts' },
  },
});
const SCHEMA = args.schema;
if (!/^[a-z_][a-z0-9_]*$/.test(SCHEMA))
  throw new Error(`--schema ${SCHEMA}: lower-case letters, digits and _ only`);
const S = `"${SCHEMA}"`;
const AGGREGATES = 4000;

const pool = new pg.Pool({ connectionString: DATABASE_URL });
try {
  await pool.query(`DROP SCHEMA IF EXISTS ${S} CASCADE`);
  await migrate(pool, { schema: SCHEMA });
  await pool.query(`CREATE TABLE ${S}.orders (id bigserial PRIMARY KEY, payload jsonb NOT NULL)`);
  await pool.query(`CREATE TABLE ${S}.bare (id bigserial PRIMARY KEY, payload jsonb NOT NULL)`);
  await pool.query(
    `INSERT INTO ${S}.aggregate_sequences (aggregate_type, aggregate_id, last_sequence, sequence_base)
     SELECT 'order', 'c' || g, 0, 0 FROM generate_series(1, ${AGGREGATES}) g`,
  );
  // Copies of events: the primary key alone; + the pending index; + the checks; the real one adds the triggers.
  const copy = async (name: string, like: string) => {
    await pool.query(`CREATE TABLE ${S}.${name} (LIKE ${S}.events ${like}) WITH (fillfactor = 90)`);
    if (!like.includes('ALL')) await pool.query(`ALTER TABLE ${S}.${name} ADD PRIMARY KEY (id)`);
  };
  await copy('ev_key', 'INCLUDING DEFAULTS INCLUDING IDENTITY');
  await copy('ev_index', 'INCLUDING DEFAULTS INCLUDING IDENTITY');
  await pool.query(`CREATE INDEX ON ${S}.ev_index (id) WHERE status = 'pending'`);
  await copy('ev_checked', 'INCLUDING ALL');

  const json = BENCH_PAYLOAD_JSON;
  const body = `'\\x${encodeWalBody(benchEvent()).toString('hex')}'::bytea`;
  // The aggregate number is the one parameter ($1 of the script); the rest written in as literals.
  const table = (sql: string) => eventLiterals(sql, '$1::int').replaceAll('$11::bigint', '$1::int::bigint');
  const wal = (sql: string) =>
    aggregateLiterals(sql, '$1::int')
      .replaceAll('$1::bytea', body)
      .replaceAll('$4::bigint', '$1::int::bigint');
  const row = (t: string) =>
    `INSERT INTO ${S}.${t} (event_id, partition, aggregate_type, aggregate_id, sequence, sequence_base, event_type,
       schema_version, topic, payload, payload_bytes, headers, deliver_after, next_attempt_at)
     VALUES (gen_random_uuid(), ${S}.partition_of('order', 'c' || $1::int), 'order', 'c' || $1::int, $1::int, 0,
       'order.placed', 1, 'bench.order.placed', '${json}'::jsonb, NULL, '{}'::jsonb, NULL, now())`;
  const woken = enqueueStatements(S, wakeChannel(SCHEMA));
  const quiet = enqueueStatements(S, null);
  const bump = (chain: boolean) =>
    `UPDATE ${S}.aggregate_sequences s SET last_sequence = s.last_sequence + 1, written_at = now()${
      chain
        ? `, prior_id = CASE WHEN s.last_id_sequence = s.last_sequence THEN s.last_id END,
             last_id = nextval('${S}.events_id_seq'::regclass), last_id_sequence = s.last_sequence + 1`
        : ''
    } WHERE s.aggregate_type = 'order' AND s.aggregate_id = 'c' || $1::int`;
  const parts: Record<string, string> = {
    'business only': 'SELECT $1::int',
    bare: `INSERT INTO ${S}.bare (payload) VALUES ('${json}')`,
    'event row, primary key only': row('ev_key'),
    '+ pending index': row('ev_index'),
    '+ check': row('ev_checked'),
    '+ dead-count triggers (events)': row('events'),
    'caller version, no NOTIFY check': table(quiet.oneVersioned),
    'caller version': table(woken.oneVersioned),
    'sequence row UPDATE alone': bump(false),
    'sequence row UPDATE with the chain': bump(true),
    'default, no NOTIFY check': table(quiet.oneKnown),
    default: table(woken.oneKnown),
    'WAL message alone, unsigned': `SELECT pg_logical_emit_message(true, '${eventsPrefix(SCHEMA)}', ${body}) FROM (SELECT $1::int) x`,
    'WAL mode, caller version': wal(walStatements(SCHEMA, S).oneVersioned),
    'WAL mode': wal(walStatements(SCHEMA, S).oneKnown),
  };
  const only = args.only?.split(',');
  const names = Object.keys(parts).filter((k) => only === undefined || only.includes(k));
  const samples = new Map<string, number[]>(names.map((n) => [n, []]));
  const n = Number(args.tx);
  for (let r = 0; r < Number(args.rounds); r++) {
    for (const name of names) {
      const sql = parts[name]!;
      if (/\$([2-9]|1\d)/.test(sql)) throw new Error(`${name}: a parameter is left in the statement`);
      const c = new pg.Client({ connectionString: DATABASE_URL });
      await c.connect();
      try {
        const pid = (await c.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]!.p;
        const onCpu = () => Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
        const run = async (k: number) => {
          for (let i = 0; i < k; i++) {
            await c.query({ name: 'b', text: 'BEGIN' });
            await c.query({ name: 'o', text: `INSERT INTO ${S}.orders (payload) VALUES ('${json}')` });
            const aggregate = 1 + Math.floor(Math.random() * AGGREGATES);
            await c.query({ name: 's', text: sql, values: sql.includes('$1') ? [aggregate] : [] });
            await c.query({ name: 'c', text: 'COMMIT' });
          }
        };
        await run(100);
        const before = onCpu();
        await run(n);
        samples.get(name)!.push((onCpu() - before) / 1000 / n);
      } finally {
        await c.end();
      }
    }
    console.log(`round ${r + 1} done`);
  }
  console.log('| part | backend µs/tx, min | median |\n|---|---|---|');
  for (const name of names) {
    const xs = [...samples.get(name)!].sort((a, b) => a - b);
    console.log(`| ${name} | ${xs[0]!.toFixed(0)} | ${xs[Math.floor(xs.length / 2)]!.toFixed(0)} |`);
  }
} finally {
  await pool.query(`DROP SCHEMA IF EXISTS ${S} CASCADE`);
  await pool.end();
}
