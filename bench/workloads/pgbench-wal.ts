/**
 * W3 under pgbench: a business INSERT plus (a) a bare INSERT of the same payload, (b) the
 * producer's table-mode statement (the known-aggregate path), (c) its caller-version statement
 * (the event row only), (d) its WAL-mode statement (`via: 'wal'`), (e) WAL mode with a caller
 * version (the message only), as pgbench scripts generated from the statements' real text (the
 * parameters written in as literals, the aggregate id and the caller's version from pgbench).
 * `-M prepared -c 8 -j 2 -T <seconds>`, interleaved rounds. A pgbench reads `:name` as a variable
 * even inside a string, so the message prefix is spelled with chr(58).
 *
 * Run by bench/pgbench-wal.ts and bench/targets.ts.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { enqueueStatements, wakeChannel } from '../../src/producer/enqueue-sql.js';
import { walStatements } from '../../src/producer/enqueue-wal-sql.js';
import { prepareEvent } from '../../src/producer/event.js';
import { encodeWalBody, eventsPrefix } from '../../src/producer/wal-message.js';
import { migrate } from '../../src/schema/migrate.js';
import { DATABASE_URL } from '../lib.js';

export const PGBENCH_BARE = 'business + bare INSERT';
export const PGBENCH_TABLE = 'business + table-mode enqueue statement';
export const PGBENCH_TABLE_VERSIONED = 'business + table-mode enqueue statement, caller version';
export const PGBENCH_WAL = 'business + WAL-mode enqueue statement';
export const PGBENCH_WAL_VERSIONED = 'business + WAL-mode enqueue statement, caller version';

/** Each script's TPS, round by round, in the order run (the bare INSERT first). */
export type PgbenchRuns = Array<{ readonly name: string; readonly tps: number[] }>;

/** The schema the runs use unless told (dropped before and after). */
export const PGBENCH_SCHEMA = 'bench_pgbench_wal';
const AGGREGATES = 4000;

/** The bench's event: a ~250-byte JSON order of aggregate `order`/`c1`. */
export const BENCH_PAYLOAD = { sku: 'ABC-123', quantity: 2, note: 'x'.repeat(200) };
export const BENCH_PAYLOAD_JSON = JSON.stringify(BENCH_PAYLOAD);
export const benchEvent = () =>
  prepareEvent(
    {
      aggregateType: 'order',
      aggregateId: 'c1',
      type: 'order.placed',
      topic: 'bench.order.placed',
      payload: BENCH_PAYLOAD,
    },
    'event',
    { maxPayloadBytes: 1 << 20, newEventId: () => '0190f6a2-7b3c-7def-8123-456789abcdef', traceHeaders: {} },
  );

/** A producer statement's aggregate parameters written in: type `order`, id `'c' || <number>` (SQL). */
export function aggregateLiterals(sql: string, number: string): string {
  return sql
    .trim()
    .replaceAll('$2::text', `'order'::text`)
    .replaceAll('$3::text', `('c' || ${number})::text`)
    .replaceAll('$2,', `'order',`)
    .replaceAll('$3,', `('c' || ${number}),`);
}

/** A table-mode statement's parameters written in as the bench's event (a random event id). */
export function eventLiterals(sql: string, number: string): string {
  return aggregateLiterals(sql, number)
    .replaceAll('$1::uuid', 'gen_random_uuid()')
    .replaceAll('$4::text', `'order.placed'::text`)
    .replaceAll('$5::int', '1::int')
    .replaceAll('$6::text', `'bench.order.placed'::text`)
    .replaceAll('$7::jsonb', `'${BENCH_PAYLOAD_JSON}'::jsonb`)
    .replaceAll('$8::bytea', 'NULL::bytea')
    .replaceAll('$9::jsonb', `'{}'::jsonb`)
    .replaceAll('$10::timestamptz', 'NULL::timestamptz');
}

/** The scripts' statements after the business INSERT, by name, parameters written in. */
function statements(schema: string): Record<string, string> {
  const S = `"${schema}"`;
  const json = BENCH_PAYLOAD_JSON;
  const event = benchEvent();
  const aggregate = (sql: string) => aggregateLiterals(sql, ':aid');
  const message = (sql: string) =>
    aggregate(sql)
      .replaceAll('$1::bytea', `'\\x${encodeWalBody(event).toString('hex')}'::bytea`)
      .replaceAll(`'${eventsPrefix(schema)}'`, `('tx-outbox' || chr(58) || '${schema}')`);
  const row = (sql: string) => eventLiterals(sql, ':aid');
  const table = enqueueStatements(S, wakeChannel(schema));
  const wal = walStatements(schema, S);
  return {
    [PGBENCH_BARE]: `INSERT INTO ${S}.bare (payload) VALUES ('${json}')`,
    [PGBENCH_TABLE]: row(table.oneKnown),
    // A random version a transaction: the caller's, unique per aggregate but for a 1-in-10^15 chance.
    [PGBENCH_TABLE_VERSIONED]: row(table.oneVersioned).replaceAll('$11::bigint', ':ver::bigint'),
    [PGBENCH_WAL]: message(wal.oneKnown),
    [PGBENCH_WAL_VERSIONED]: message(wal.oneVersioned).replaceAll('$4::bigint', ':aid::bigint'),
  };
}

/** The scripts under pgbench, `rounds` interleaved rounds of `seconds` each, in a schema of their own. */
export async function pgbenchWalRuns(
  pool: pg.Pool,
  options: { seconds: number; rounds: number; schema?: string; log?: (line: string) => void },
): Promise<PgbenchRuns> {
  const log = options.log ?? console.log;
  const schema = options.schema ?? PGBENCH_SCHEMA;
  const S = `"${schema}"`;
  const SLOT = `txo_${schema}`;
  const dropSlot = () =>
    pool.query('SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1', [
      SLOT,
    ]);
  const dir = mkdtempSync(join(tmpdir(), 'txo-pgbench-'));
  try {
    await dropSlot();
    await pool.query(`DROP SCHEMA IF EXISTS ${S} CASCADE`);
    await migrate(pool, { schema });
    await pool.query(`CREATE TABLE ${S}.orders (id bigserial PRIMARY KEY, payload jsonb NOT NULL)`);
    await pool.query(`CREATE TABLE ${S}.bare (id bigserial PRIMARY KEY, payload jsonb NOT NULL)`);
    await pool.query(
      `INSERT INTO ${S}.aggregate_sequences (aggregate_type, aggregate_id, last_sequence, sequence_base)
       SELECT 'order', 'c' || g, 0, 0 FROM generate_series(1, ${AGGREGATES}) g`,
    );
    await pool.query(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, [SLOT]);
    const json = JSON.stringify({ sku: 'ABC-123', quantity: 2, note: 'x'.repeat(200) });
    const files = Object.entries(statements(schema)).map(([name, sql], i) => {
      if (/\$\d/.test(sql)) throw new Error(`${name}: a parameter is left in the script`);
      const file = join(dir, `${i}.sql`);
      writeFileSync(
        file,
        `\\set aid random(1, ${AGGREGATES})\n\\set ver random(1, 1000000000000000)\nBEGIN;\n` +
          `INSERT INTO ${S}.orders (payload) VALUES ('${json}');\n${sql};\nCOMMIT;\n`,
      );
      return { name, file, tps: [] as number[] };
    });
    const url = new URL(DATABASE_URL);
    const connection = ['-h', url.hostname, '-p', url.port || '5432', '-U', url.username || 'postgres'];
    for (let r = 0; r < options.rounds; r++) {
      for (const f of files) {
        const run = spawnSync(
          'pgbench',
          [...connection, '-n', '-M', 'prepared', '-c', '8', '-j', '2', '-T', String(options.seconds)].concat(
            ['-f', f.file, url.pathname.slice(1)],
          ),
          { encoding: 'utf8' },
        );
        const tps = /tps = ([0-9.]+)/.exec(run.stdout)?.[1];
        if (tps === undefined) throw new Error(`pgbench failed: ${run.stderr}`);
        f.tps.push(Number(tps));
        log(`round ${r + 1} ${f.name}: ${tps} tps`);
      }
    }
    return files.map(({ name, tps }) => ({ name, tps }));
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await dropSlot();
    await pool.query(`DROP SCHEMA IF EXISTS ${S} CASCADE`);
  }
}
