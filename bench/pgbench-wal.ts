/**
 * W3 under pgbench: a business INSERT plus (a) a bare INSERT of the same payload, (b) the
 * producer's WAL-mode statement (`via: 'wal'`, the known-aggregate path; and with a caller version: the
 * message only), (c) its table-mode statement (the known-aggregate path, and with a caller
 * version: the event row only), as pgbench scripts generated from the statements' real text (the parameters written
 * in as literals, the aggregate id from pgbench). `-M prepared -c 8 -j 2 -T <seconds>`, interleaved
 * rounds; prints each round's TPS and the medians. A pgbench reads `:name` as a variable even
 * inside a string, so the message prefix is spelled with chr(58).
 *
 * `--schema` names the scratch schema (dropped at the end), for runs side by side.
 *
 *   npx tsx bench/pgbench-wal.ts [--seconds 10] [--rounds 3] [--schema bench_pgbench_wal]
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { enqueueStatements, wakeChannel } from '../src/producer/enqueue-sql.js';
import { walStatements } from '../src/producer/enqueue-wal-sql.js';
import { prepareEvent } from '../src/producer/event.js';
import { encodeWalBody, eventsPrefix } from '../src/producer/wal-message.js';
import { migrate } from '../src/schema/migrate.js';
import { DATABASE_URL } from './lib.js';

const { values: args } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    rounds: { type: 'string', default: '3' },
    schema: { type: 'string', default: 'bench_pgbench_wal' },
  },
});
const SCHEMA = args.schema;
if (!/^[a-z_][a-z0-9_]*$/.test(SCHEMA))
  throw new Error(`--schema ${SCHEMA}: lower-case letters, digits and _ only`);
const S = `"${SCHEMA}"`;
const SLOT = `txo_${SCHEMA}`;
const AGGREGATES = 4000;

const pool = new pg.Pool({ connectionString: DATABASE_URL });
const dropSlot = () =>
  pool.query('SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1', [
    SLOT,
  ]);
try {
  await dropSlot();
  await pool.query(`DROP SCHEMA IF EXISTS ${S} CASCADE`);
  await migrate(pool, { schema: SCHEMA });
  await pool.query(`CREATE TABLE ${S}.orders (id bigserial PRIMARY KEY, payload jsonb NOT NULL)`);
  await pool.query(`CREATE TABLE ${S}.bare (id bigserial PRIMARY KEY, payload jsonb NOT NULL)`);
  await pool.query(
    `INSERT INTO ${S}.aggregate_sequences (aggregate_type, aggregate_id, last_sequence, sequence_base)
     SELECT 'order', 'c' || g, 0, 0 FROM generate_series(1, ${AGGREGATES}) g`,
  );
  await pool.query(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, [SLOT]);

  const payload = { sku: 'ABC-123', quantity: 2, note: 'x'.repeat(200) };
  const json = JSON.stringify(payload);
  const event = prepareEvent(
    { aggregateType: 'order', aggregateId: 'c1', type: 'order.placed', topic: 'bench.order.placed', payload },
    'event',
    { maxPayloadBytes: 1 << 20, newEventId: () => '0190f6a2-7b3c-7def-8123-456789abcdef', traceHeaders: {} },
  );
  const aggregate = (sql: string) =>
    sql
      .trim()
      .replaceAll('$2::text', `'order'::text`)
      .replaceAll('$3::text', `('c' || :aid)::text`)
      .replaceAll('$2,', `'order',`)
      .replaceAll('$3,', `('c' || :aid),`);
  const wal = aggregate(walStatements(SCHEMA, S).oneKnown)
    .replaceAll('$1::bytea', `'\\x${encodeWalBody(event).toString('hex')}'::bytea`)
    .replaceAll(`'${eventsPrefix(SCHEMA)}'`, `('tx-outbox' || chr(58) || '${SCHEMA}')`);
  const walVersioned = aggregate(walStatements(SCHEMA, S).oneVersioned)
    .replaceAll('$1::bytea', `'\\x${encodeWalBody(event).toString('hex')}'::bytea`)
    .replaceAll('$4::bigint', ':aid::bigint')
    .replaceAll(`'${eventsPrefix(SCHEMA)}'`, `('tx-outbox' || chr(58) || '${SCHEMA}')`);
  const tableParams = (sql: string) =>
    aggregate(sql)
      .replaceAll('$1::uuid', 'gen_random_uuid()')
      .replaceAll('$4::text', `'order.placed'::text`)
      .replaceAll('$5::int', '1::int')
      .replaceAll('$6::text', `'bench.order.placed'::text`)
      .replaceAll('$7::jsonb', `'${json}'::jsonb`)
      .replaceAll('$8::bytea', 'NULL::bytea')
      .replaceAll('$9::jsonb', `'{}'::jsonb`)
      .replaceAll('$10::timestamptz', 'NULL::timestamptz')
      .replaceAll('$11::bigint', ':aid::bigint');
  const tableStatements = enqueueStatements(S, wakeChannel(SCHEMA));
  const table = tableParams(tableStatements.oneKnown);
  const tableVersioned = tableParams(tableStatements.oneVersioned);
  const scripts: Record<string, string> = {
    'business + bare INSERT': `INSERT INTO ${S}.bare (payload) VALUES ('${json}')`,
    'business + WAL-mode enqueue statement': wal,
    'business + WAL-mode enqueue statement, caller version': walVersioned,
    'business + table-mode enqueue statement': table,
    'business + table-mode enqueue statement, caller version': tableVersioned,
  };
  const dir = mkdtempSync(join(tmpdir(), 'txo-pgbench-'));
  const files = Object.entries(scripts).map(([name, sql], i) => {
    if (/\$\d/.test(sql)) throw new Error(`${name}: a parameter is left in the script`);
    const file = join(dir, `${i}.sql`);
    writeFileSync(
      file,
      `\\set aid random(1, ${AGGREGATES})\nBEGIN;\nINSERT INTO ${S}.orders (payload) VALUES ('${json}');\n${sql};\nCOMMIT;\n`,
    );
    return { name, file, tps: [] as number[] };
  });
  const url = new URL(DATABASE_URL);
  for (let r = 0; r < Number(args.rounds); r++) {
    for (const f of files) {
      const run = spawnSync(
        'pgbench',
        [
          '-h',
          url.hostname,
          '-p',
          url.port || '5432',
          '-U',
          url.username || 'postgres',
          '-n',
          '-M',
          'prepared',
        ].concat(['-c', '8', '-j', '2', '-T', String(args.seconds), '-f', f.file, url.pathname.slice(1)]),
        { encoding: 'utf8' },
      );
      const tps = /tps = ([0-9.]+)/.exec(run.stdout)?.[1];
      if (tps === undefined) throw new Error(`pgbench failed: ${run.stderr}`);
      f.tps.push(Number(tps));
      console.log(`round ${r + 1} ${f.name}: ${tps} tps`);
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const bare = median(files[0]!.tps);
  for (const f of files)
    console.log(`${f.name}: median ${median(f.tps).toFixed(0)} tps, ${(median(f.tps) / bare).toFixed(2)}×`);
} finally {
  await dropSlot();
  await pool.query(`DROP SCHEMA IF EXISTS ${S} CASCADE`);
  await pool.end();
}
