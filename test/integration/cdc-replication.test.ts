/**
 * The replication stream against the shared PostgreSQL: a scratch table in a scratch schema, its own
 * publication and slot (dropped at the end). Other work in the same database emits logical messages
 * too, so every check filters to this file's table and message prefix.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Lsn } from '../../src/cdc/lsn.js';
import { parseLsn } from '../../src/cdc/lsn.js';
import { parseTimestamptz } from '../../src/cdc/pgoutput.js';
import {
  ReplicationStream,
  type ReplicationStreamOptions,
  type StreamChange,
} from '../../src/cdc/replication.js';
import { TcpProxy } from '../../src/testing/tcp-proxy.js';
import { waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { expectNoUnhandledRejections } from '../helpers/unhandled.js';

expectNoUnhandledRejections();

const suffix = randomBytes(4).toString('hex');
const schema = `cdc_wire_${suffix}`;
const slot = `cdc_wire_${suffix}`;
const publication = `cdc_wire_${suffix}`;
const prefix = `cdc-wire:${suffix}`;
const connection: pg.ClientConfig = { connectionString: DATABASE_URL };

let pool: pg.Pool;
const streams: ReplicationStream[] = [];

function open(options: Partial<ReplicationStreamOptions> = {}): ReplicationStream {
  const stream = new ReplicationStream({ connection, slot, publication, statusIntervalMs: 200, ...options });
  streams.push(stream);
  return stream;
}

/** Reads changes until `done` says so; only this file's table and prefix count. */
async function collect(
  stream: ReplicationStream,
  done: (mine: StreamChange[]) => boolean,
  { max = 1000, timeoutMs = 20_000 } = {},
): Promise<StreamChange[]> {
  const mine: StreamChange[] = [];
  const deadline = Date.now() + timeoutMs;
  while (!done(mine)) {
    if (Date.now() > deadline) throw new Error(`timed out with ${mine.length} changes`);
    for (const change of await stream.next(max)) if (isMine(change)) mine.push(change);
  }
  return mine;
}

/** This file's changes; begin/commit only of transactions that touched the table (tracked by xid order). */
function isMine(change: StreamChange): boolean {
  const m = change.message;
  if (m.tag === 'insert' || m.tag === 'relation') return m.schema === schema;
  if (m.tag === 'message') return m.prefix === prefix;
  return m.tag === 'begin' || m.tag === 'commit';
}

const inserts = (changes: StreamChange[]) => changes.filter((c) => c.message.tag === 'insert');
const columnValue = (change: StreamChange, column: string): string | null => {
  if (change.message.tag !== 'insert') throw new Error('not an insert');
  return change.message.values[change.message.columns.indexOf(column)] ?? null;
};

async function slotState(): Promise<{ active: boolean; pid: number | null; confirmed: Lsn }> {
  const { rows } = await pool.query<{
    active: boolean;
    active_pid: number | null;
    confirmed_flush_lsn: string;
  }>('SELECT active, active_pid, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1', [
    slot,
  ]);
  const row = rows[0]!;
  return { active: row.active, pid: row.active_pid, confirmed: parseLsn(row.confirmed_flush_lsn) };
}

async function closeAll(): Promise<void> {
  await Promise.all(streams.splice(0).map((s) => s.close()));
  await waitFor(async () => !(await slotState()).active, { what: 'the slot to be released' });
}

/** The end LSN of the last commit among `changes` (what a reader confirms once it has handled them). */
function lastCommitEnd(changes: StreamChange[]): Lsn {
  for (let i = changes.length - 1; i >= 0; i--) {
    const m = changes[i]!.message;
    if (m.tag === 'commit') return m.endLsn;
  }
  throw new Error('no commit');
}

/** Reads (and drops) changes until next() rejects; returns the rejection. */
async function readUntilFailure(stream: ReplicationStream): Promise<unknown> {
  for (;;) {
    try {
      await stream.next(1000);
    } catch (error) {
      return error;
    }
  }
}

afterEach(closeAll);

beforeAll(async () => {
  pool = new pg.Pool({ connectionString: DATABASE_URL, max: 3 });
  await pool.query(`CREATE SCHEMA ${schema}`);
  await pool.query(
    `CREATE TABLE ${schema}.events (id bigint PRIMARY KEY, payload text, note text, created_at timestamptz NOT NULL DEFAULT now())`,
  );
  await pool.query(`CREATE PUBLICATION ${publication} FOR TABLE ${schema}.events WITH (publish = 'insert')`);
  await pool.query(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, [slot]);
});

afterAll(async () => {
  await Promise.all(streams.splice(0).map((s) => s.close()));
  // An abandoned slot retains WAL for everyone: terminate whatever holds it, then drop it.
  await pool.query(
    'SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active',
    [slot],
  );
  await waitFor(async () => !(await slotState()).active, { what: 'the slot to be released' });
  await pool.query('SELECT pg_drop_replication_slot($1)', [slot]);
  await pool.query(`DROP PUBLICATION IF EXISTS ${publication}`);
  await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await pool.end();
});

describe('ReplicationStream', () => {
  it('decodes inserts (NULLs, multibyte) and logical messages, confirms, and resumes after the confirmed LSN', async () => {
    const stream = open();
    await stream.start();
    const payload = '{"name":"Zoë 🚀 日本"}';
    const content = Buffer.from([0x00, 0xff, 0xc3, 0x28, 0x00]);
    await pool.query('BEGIN');
    try {
      await pool.query(
        `INSERT INTO ${schema}.events (id, payload, note) VALUES (1, $1, NULL), (2, '', 'x')`,
        [payload],
      );
      await pool.query('SELECT pg_logical_emit_message(true, $1, $2::bytea)', [prefix, content]);
      await pool.query('COMMIT');
    } catch (error) {
      await pool.query('ROLLBACK');
      throw error;
    }
    await pool.query(`SELECT pg_logical_emit_message(false, $1, 'non-tx')`, [prefix]);

    const first = await collect(stream, (m) =>
      m.some((c) => c.message.tag === 'message' && !c.message.transactional),
    );
    const rows = inserts(first);
    expect(rows.map((c) => columnValue(c, 'id'))).toEqual(['1', '2']);
    expect(columnValue(rows[0]!, 'payload')).toBe(payload);
    expect(columnValue(rows[0]!, 'note')).toBeNull();
    expect(columnValue(rows[1]!, 'payload')).toBe('');
    const createdAt = parseTimestamptz(columnValue(rows[0]!, 'created_at')!);
    expect(Math.abs(createdAt.getTime() - Date.now())).toBeLessThan(60_000); // UTC + ISO text parses
    expect(first.some((c) => c.message.tag === 'relation' && c.message.table === 'events')).toBe(true);
    const messages = first.flatMap((c) => (c.message.tag === 'message' ? [c.message] : []));
    expect(messages.map((m) => [m.transactional, m.content.toString('latin1')])).toEqual([
      [true, content.toString('latin1')],
      [false, 'non-tx'],
    ]);
    // The transaction's commit follows its inserts; confirm its end.
    const commitIndex = first.findIndex((c, i) => c.message.tag === 'commit' && i > first.indexOf(rows[1]!));
    const commit = first[commitIndex]!.message;
    if (commit.tag !== 'commit') throw new Error('no commit');
    expect(stream.serverLsn).toBeGreaterThanOrEqual(commit.endLsn);
    const nonTx = messages[1]!;
    stream.confirm(nonTx.lsn);
    expect(stream.confirmed).toBe(nonTx.lsn);
    stream.confirm(1n); // monotonic
    expect(stream.confirmed).toBe(nonTx.lsn);
    await waitFor(async () => (await slotState()).confirmed >= nonTx.lsn, { what: 'a status update' });
    await closeAll();

    await pool.query(`INSERT INTO ${schema}.events (id, payload) VALUES (3, 'later')`);
    const again = open();
    await again.start();
    const second = await collect(again, (m) => inserts(m).length > 0 && m.at(-1)!.message.tag === 'commit');
    expect(inserts(second).map((c) => columnValue(c, 'id'))).toEqual(['3']); // nothing before the confirmed LSN
    expect(second.some((c) => c.message.tag === 'message')).toBe(false);
    again.confirm(lastCommitEnd(second));
  });

  it('answers a keepalive that asks for a reply at once (no status timer needed to stay connected)', async () => {
    // wal_sender_timeout is user-settable: at 1 s the server asks for a reply after 0.5 s of quiet
    // and terminates the walsender at 1 s without one. The status timer is off (an hour).
    const stream = open({
      connection: { connectionString: DATABASE_URL, options: '-c wal_sender_timeout=1000' },
      statusIntervalMs: 3_600_000,
    });
    await stream.start();
    await pool.query(`INSERT INTO ${schema}.events (id) VALUES (40001)`);
    const changes = await collect(stream, (m) => inserts(m).length > 0 && m.at(-1)!.message.tag === 'commit');
    const end = lastCommitEnd(changes);
    stream.confirm(end);
    const pid = (await slotState()).pid;
    // Idle for 3 s (three timeouts): the replies carry the confirmed LSN and keep the walsender alive.
    await new Promise((r) => setTimeout(r, 3000));
    const state = await slotState();
    expect(state.pid).toBe(pid);
    expect(state.confirmed).toBeGreaterThanOrEqual(end);
    await pool.query(`INSERT INTO ${schema}.events (id) VALUES (40002)`);
    const later = await collect(stream, (m) => inserts(m).length > 0 && m.at(-1)!.message.tag === 'commit');
    expect(inserts(later).map((c) => columnValue(c, 'id'))).toEqual(['40002']);
    stream.confirm(lastCommitEnd(later));
  });

  it('refuses a slot another connection streams (naming its pid) and a slot that does not exist', async () => {
    const stream = open();
    await stream.start();
    const { pid } = await slotState();
    const rival = open();
    await expect(rival.start()).rejects.toMatchObject({
      code: 'TXO_CDC_SLOT_ACTIVE',
      message: expect.stringContaining(`pid ${pid}`),
    });
    await expect(rival.next(1)).rejects.toMatchObject({ code: 'TXO_CDC_SLOT_ACTIVE' });
    const missing = new ReplicationStream({ connection, slot: `${slot}_none`, publication });
    await expect(missing.start()).rejects.toMatchObject({ code: 'TXO_CDC_NO_SLOT' });
    await missing.close();
  });

  it('10,000 inserts: pauses the socket above the high-water mark, resumes below half, loses nothing', async () => {
    const stream = open({ highWaterMark: 500 });
    await stream.start();
    await pool.query(
      `INSERT INTO ${schema}.events (id, payload) SELECT 1000 + g, repeat('p', 300) FROM generate_series(1, 10000) g`,
    );
    await waitFor(() => stream.paused, { what: 'the socket to pause' });
    const bufferedAtPause = stream.buffered;
    expect(bufferedAtPause).toBeGreaterThanOrEqual(500);
    await new Promise((r) => setTimeout(r, 200));
    expect(stream.buffered).toBe(bufferedAtPause); // paused: nothing more is read
    let pauses = 0;
    let wasPaused = true;
    const ids: number[] = [];
    let end: Lsn = 0n;
    while (ids.length < 10_000 || end === 0n) {
      for (const change of await stream.next(100)) {
        if (change.message.tag === 'commit' && ids.length >= 10_000 && end === 0n)
          end = change.message.endLsn;
        if (change.message.tag === 'insert' && change.message.schema === schema)
          ids.push(Number(columnValue(change, 'id')));
      }
      if (stream.paused && !wasPaused) pauses++;
      wasPaused = stream.paused;
      expect(stream.buffered).toBeLessThanOrEqual(500 + 2000); // one socket read past the mark at most
      await new Promise((r) => setImmediate(r));
    }
    expect(ids).toEqual(Array.from({ length: 10_000 }, (_, i) => 1001 + i));
    expect(pauses).toBeGreaterThan(0); // resumed and paused again
    stream.confirm(end);
  });

  it('message contents stay intact while buffered (pg reuses its read buffer)', async () => {
    const stream = open({ highWaterMark: 300 });
    await stream.start();
    await pool.query(
      `SELECT pg_logical_emit_message(true, $1, convert_to(lpad(g::text, 1000, chr(65 + g % 26)), 'UTF8')) FROM generate_series(1, 3000) g`,
      [prefix],
    );
    await waitFor(() => stream.paused, { what: 'the socket to pause' });
    const contents: string[] = [];
    let end: Lsn = 0n;
    while (contents.length < 3000 || end === 0n) {
      for (const c of await stream.next(50)) {
        if (c.message.tag === 'message' && c.message.prefix === prefix)
          contents.push(c.message.content.toString());
        if (c.message.tag === 'commit' && contents.length >= 3000 && end === 0n) end = c.message.endLsn;
      }
      await new Promise((r) => setImmediate(r));
    }
    for (let g = 1; g <= 3000; g++) {
      expect(contents[g - 1]).toBe(String(g).padStart(1000, String.fromCharCode(65 + (g % 26))));
    }
    stream.confirm(end);
  });

  it('a walsender killed mid-stream rejects next() once: no crash, no unhandled rejection', async () => {
    const stream = open();
    await stream.start();
    await pool.query(`INSERT INTO ${schema}.events (id) VALUES (20001)`);
    await collect(stream, (m) => inserts(m).length > 0);
    const { pid } = await slotState();
    const killed = await pool.query('SELECT pg_terminate_backend($1) AS killed', [pid]);
    expect(killed.rows[0].killed).toBe(true);
    const error = await readUntilFailure(stream);
    expect(error).toMatchObject({ code: '57P01' });
    await expect(stream.next(10)).rejects.toBe(error); // the same failure, not a new one
    await stream.close();
    await stream.close(); // idempotent
  });

  it('a held network (proxy holds both ways) fails with TXO_CDC_SILENT within silenceTimeoutMs', async () => {
    const url = new URL(DATABASE_URL);
    const proxy = await TcpProxy.start({ host: url.hostname, port: Number(url.port || 5432) });
    try {
      const silenceTimeoutMs = 1500;
      const stream = open({
        // No connectionString: pg lets its host and port override the proxy's.
        connection: {
          host: '127.0.0.1',
          port: proxy.address.port,
          user: decodeURIComponent(url.username) || 'postgres',
          password: decodeURIComponent(url.password) || undefined,
          database: url.pathname.slice(1) || 'postgres',
        },
        silenceTimeoutMs,
      });
      await stream.start();
      expect(proxy.connections).toBe(1);
      await pool.query(`INSERT INTO ${schema}.events (id) VALUES (30001)`);
      await collect(stream, (m) => inserts(m).length > 0);
      const heldAt = performance.now();
      proxy.stall();
      const outcome = await readUntilFailure(stream);
      const elapsed = performance.now() - heldAt;
      expect(outcome).toMatchObject({ code: 'TXO_CDC_SILENT' });
      expect(elapsed).toBeGreaterThanOrEqual(silenceTimeoutMs - 250);
      expect(elapsed).toBeLessThan(silenceTimeoutMs + 1000);
      await stream.close();
    } finally {
      await proxy.cut();
      await proxy.close();
    }
    // The server notices the dead client only at wal_sender_timeout; free the slot now.
    await pool.query(
      'SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active',
      [slot],
    );
  });
});
