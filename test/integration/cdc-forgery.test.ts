/**
 * Issue 24, item 1: forged events through the CDC relay. Every login may call
 * pg_logical_emit_message, so a login role with no grants at all, and one with only the
 * consumer's (roles from `tx-outbox roles`), write logical messages with the events prefix of a
 * schema a real CDC relay streams: F#1 of a new aggregate, a replacement A#4, B#1000 ahead of the
 * genuine B#3 and B#4, a 4 MB JSON array two million levels deep, partitions 999 and -1, a
 * sequence_base above the sequence, a non-transactional one — each in format 2 with a made-up MAC
 * and in format 1 (no MAC) — and look-alike heartbeats. None may reach the broker or the table;
 * the genuine events of the producer role (WAL mode) all arrive, in order, nothing dead, the
 * stream never reconnects. Then `tx-outbox roles --section wal` revokes the function: the forgers
 * cannot call it, the producer and the relay still work.
 *
 * A private PostgreSQL (wal_level = logical; roles are cluster-wide): the roles are this file's,
 * dropped with the cluster.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CdcRelay, createCdcRelay } from '../../src/cdc/relay.js';
import { ensureCdcSlot } from '../../src/cdc/setup.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent, PreparedEvent } from '../../src/producer/event.js';
import { encodeWalBody, eventsPrefix, heartbeatPrefix } from '../../src/producer/wal-message.js';
import { walSlotGate } from '../../src/producer/wal-slot.js';
import { migrate } from '../../src/schema/migrate.js';
import { rolesSql } from '../../src/schema/roles.js';
import { cdcNames, firstDeliveryOrderViolations } from '../helpers/cdc.js';
import { inTransaction, waitFor } from '../helpers/db.js';
import { type LogLine, logRecorder } from '../helpers/log-recorder.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';
import { PrivatePostgres } from '../helpers/private-postgres.js';

const SCHEMA = `forge_${randomBytes(3).toString('hex')}`;
const PARTITIONS = 8;
const roles = rolesSql({ schema: SCHEMA }).roles;
/** The LOGIN roles: the producer's, the relay's (with REPLICATION), and the two forgers. */
const LOGINS = {
  migrator: `${SCHEMA}_mig_login`,
  producer: `${SCHEMA}_prod_login`,
  relay: `${SCHEMA}_relay_login`,
  nobody: `${SCHEMA}_nobody`,
  consumer: `${SCHEMA}_cons_login`,
};
const SECRET = 'forged-payload-7c1d';

let server: PrivatePostgres;
let admin: pg.Pool;
const pools: Record<string, pg.Pool> = {};
let relay: CdcRelay;
const publisher = new RecordingPublisher();
const log = logRecorder();

function poolAs(user: string, options = ''): pg.Pool {
  const url = new URL(server.url());
  url.username = user;
  if (options) url.searchParams.set('options', options);
  const pool = new pg.Pool({ connectionString: url.toString(), max: 10 });
  pool.on('error', () => {});
  return pool;
}

beforeAll(async () => {
  server = await PrivatePostgres.start();
  admin = new pg.Pool({ connectionString: server.url(), max: 4 });
  const sql = rolesSql({ schema: SCHEMA });
  for (const statement of sql.setup) await admin.query(statement);
  await admin.query(`CREATE ROLE "${LOGINS.migrator}" LOGIN IN ROLE "${roles.migrator}"`);
  await admin.query(`CREATE ROLE "${LOGINS.producer}" LOGIN IN ROLE "${roles.producer}"`);
  await admin.query(`CREATE ROLE "${LOGINS.relay}" LOGIN REPLICATION IN ROLE "${roles.relay}"`);
  await admin.query(`CREATE ROLE "${LOGINS.nobody}" LOGIN`);
  await admin.query(`CREATE ROLE "${LOGINS.consumer}" LOGIN IN ROLE "${roles.consumer}"`);
  pools['migrator'] = poolAs(LOGINS.migrator, `-c role=${roles.migrator}`);
  for (const kind of ['producer', 'relay', 'nobody', 'consumer'] as const) pools[kind] = poolAs(LOGINS[kind]);
  await migrate(pools['migrator']!, { schema: SCHEMA, partitions: PARTITIONS });
  await pools['migrator']!.query(sql.grants.join('\n'));
  // The publication on the migrator's table and the slot: the superuser's (tx-outbox migrate --cdc).
  await ensureCdcSlot(admin, { schema: SCHEMA });
  walSlotGate.reset();
  relay = createCdcRelay({
    pool: pools['relay']!,
    publisher,
    schema: SCHEMA,
    pollIntervalMs: 50,
    leaseMs: 3000,
    batchSize: 100,
    heartbeatMs: 300,
    silenceTimeoutMs: 5000,
    statusIntervalMs: 100,
    backoff: { baseMs: 50, capMs: 200 },
    logger: log.logger,
  });
  await relay.start();
}, 120_000);

afterAll(async () => {
  await relay?.stop({ timeout: 5000 });
  await Promise.allSettled(Object.values(pools).map((p) => p.end()));
  await admin?.end();
  await server?.destroy();
}, 60_000);

/** A genuine event of `aggregate`, written in WAL mode by the producer role. */
async function genuine(aggregate: string, n = 1): Promise<string[]> {
  const events: OutboxEvent[] = Array.from({ length: n }, () => ({
    aggregateType: 'order',
    aggregateId: aggregate,
    type: 'changed',
    payload: { genuine: true },
  }));
  const results = await inTransaction(pools['producer']!, (tx) =>
    enqueue(tx, events, { schema: SCHEMA, via: 'wal' }),
  );
  return results.map((r) => r.eventId);
}

interface Forgery {
  readonly aggregateId: string;
  readonly sequence: number;
  readonly sequenceBase?: number;
  readonly partition?: number;
  readonly payloadJson?: string;
}

/**
 * A message as a forger writes it: format 2 with a made-up MAC, or format 1 (no MAC), a partition
 * of its choice (default 0).
 */
function forged(f: Forgery, format: 1 | 2): Buffer {
  const e: PreparedEvent = {
    eventId: randomUUID(),
    aggregateType: 'order',
    aggregateId: f.aggregateId,
    type: 'changed',
    schemaVersion: 1,
    topic: null,
    payloadJson: f.payloadJson ?? `{"forged":"${SECRET}"}`,
    payloadBytes: null,
    headers: '{}',
    deliverAfter: null,
    sequence: null,
    bytes: 0,
  };
  const head = Buffer.alloc(27);
  head.writeUInt8(format, 0);
  head.writeBigInt64BE(BigInt(f.sequence), 1);
  head.writeBigInt64BE(BigInt(f.sequenceBase ?? 0), 9);
  head.writeInt16BE(f.partition ?? 0, 17);
  head.writeBigInt64BE(BigInt(Date.now()) * 1000n, 19);
  const data = Buffer.concat([head, encodeWalBody(e)]);
  return format === 2 ? Buffer.concat([data, randomBytes(32)]) : data;
}

/** Both formats of a forgery, each in a transaction of its own; returns how many messages. */
async function forge(as: pg.Pool, f: Forgery, transactional = true): Promise<number> {
  for (const format of [2, 1] as const) {
    await as.query('SELECT pg_logical_emit_message($1, $2::text, $3::bytea)', [
      transactional,
      eventsPrefix(SCHEMA),
      forged(f, format),
    ]);
  }
  return 2;
}

/** The slot's confirmed position is at or past the WAL position now. */
async function settled(): Promise<void> {
  const { slot } = await cdcNames(admin, SCHEMA);
  const { rows } = await admin.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
  await waitFor(
    async () => {
      const r = await admin.query<{ past: boolean }>(
        'SELECT confirmed_flush_lsn >= $2::pg_lsn AS past FROM pg_replication_slots WHERE slot_name = $1',
        [slot, rows[0]!.lsn],
      );
      return r.rows[0]?.past === true;
    },
    { timeoutMs: 15_000, what: 'the slot to confirm past the forgeries' },
  );
}

function received(prefix: string): Array<{ eventId: string; aggregateId: string; sequence: number }> {
  return publisher.received
    .filter((m) => m.aggregateId.startsWith(prefix))
    .map((m) => ({ eventId: m.eventId, aggregateId: m.aggregateId, sequence: m.sequence }));
}

/** The scenario, with `forger` writing the messages; `tag` keeps each run's aggregates apart. */
async function forgeryRun(forger: pg.Pool, tag: string): Promise<number> {
  const A = `${tag}-A`;
  const B = `${tag}-B`;
  const ids = {
    a: await genuine(A, 3),
    b: await genuine(B, 2),
  };
  let forgeries = 0;
  // F#1: an aggregate no producer ever wrote.
  forgeries += await forge(forger, { aggregateId: `${tag}-F`, sequence: 1 });
  // A#4 before the genuine A#4.
  forgeries += await forge(forger, { aggregateId: A, sequence: 4 });
  // B#1000 ahead of the genuine B#3 and B#4.
  forgeries += await forge(forger, { aggregateId: B, sequence: 1000 });
  // A 4 MB JSON array two million levels deep, which enqueue refuses.
  forgeries += await forge(forger, {
    aggregateId: `${tag}-deep`,
    sequence: 1,
    payloadJson: `${'['.repeat(2_000_000)}${']'.repeat(2_000_000)}`,
  });
  // Partitions no lease covers, and a sequence_base above the sequence.
  forgeries += await forge(forger, { aggregateId: `${tag}-p999`, sequence: 1, partition: 999 });
  forgeries += await forge(forger, { aggregateId: `${tag}-pminus`, sequence: 1, partition: -1 });
  forgeries += await forge(forger, { aggregateId: `${tag}-base`, sequence: 1, sequenceBase: 5 });
  // Not transactional.
  forgeries += await forge(forger, { aggregateId: `${tag}-nontx`, sequence: 1 }, false);
  // Look-alike heartbeats: transactional and not, with content.
  await forger.query(`SELECT pg_logical_emit_message(false, $1::text, 'garbage ${SECRET}')`, [
    heartbeatPrefix(SCHEMA),
  ]);
  await forger.query(`SELECT pg_logical_emit_message(true, $1::text, '\\x00ff'::bytea)`, [
    heartbeatPrefix(SCHEMA),
  ]);

  ids.a.push(...(await genuine(A)));
  ids.b.push(...(await genuine(B, 2)));
  const end = await genuine(`${tag}-end`);
  await waitFor(() => received(tag).some((m) => m.eventId === end[0]), {
    timeoutMs: 20_000,
    what: `the genuine events of ${tag}`,
  });
  await settled();

  // Only the genuine events reached the broker, each once, in per-aggregate order.
  const got = received(tag);
  expect(got.filter((m) => ![A, B, `${tag}-end`].includes(m.aggregateId))).toEqual([]);
  expect(got.filter((m) => m.aggregateId === A).map((m) => [m.eventId, m.sequence])).toEqual(
    ids.a.map((id, i) => [id, i + 1]),
  );
  expect(got.filter((m) => m.aggregateId === B).map((m) => [m.eventId, m.sequence])).toEqual(
    ids.b.map((id, i) => [id, i + 1]),
  );
  expect(firstDeliveryOrderViolations(got)).toEqual([]);
  // Nothing went into the table (no dead row, no parked aggregate), the stream never broke.
  const { rows } = await admin.query(`SELECT aggregate_id, status, last_error FROM "${SCHEMA}".events`);
  expect(rows).toEqual([]);
  expect(relay.stats().cdc.reconnects).toBe(0);
  expect(relay.stats().cdc.handovers).toBe(0);
  // The forger may not read the key either.
  await expect(forger.query(`SELECT ipad FROM "${SCHEMA}".wal_key`)).rejects.toThrow(
    /permission denied for (schema|table)/,
  );
  return forgeries;
}

describe('forged WAL-mode events (issue 24, item 1)', () => {
  let refused = 0;

  it('a login with no grants at all publishes nothing: every forgery refused, the genuine events in order', async () => {
    refused += await forgeryRun(pools['nobody']!, 'n');
    expect(relay.stats().cdc.refusedMessages).toBe(refused);
  });

  it("a login with only the consumer's grants publishes nothing either", async () => {
    refused += await forgeryRun(pools['consumer']!, 'c');
    expect(relay.stats().cdc.refusedMessages).toBe(refused);
  });

  it('the refusals are logged rate-limited, by reason, without the content or the key', () => {
    const lines = log.lines.filter((l: LogLine) => l.msg.startsWith('WAL-mode message refused'));
    const byReason = new Map<unknown, number>();
    for (const l of lines) byReason.set(l.obj['reason'], (byReason.get(l.obj['reason']) ?? 0) + 1);
    expect([...byReason.keys()].sort()).toEqual(['format_1', 'unauthenticated']);
    // 32 refusals within seconds: the first of each reason, and at most one reminder per 10 s.
    for (const n of byReason.values()) expect(n).toBeLessThanOrEqual(3);
    const all = JSON.stringify(log.lines);
    expect(all).not.toContain(SECRET);
    expect(all).not.toMatch(/ipad|opad/);
  });

  it("a genuine event the broker refuses is handed over to the table under the relay role's grants; the stream goes on", async () => {
    // The hand-over INSERTs the failed event and its aggregate's later ones into events: the
    // relay role needs that right (without it the hand-over failed and the stream stalled).
    publisher.verdict = (m) =>
      m.aggregateId === 'handed'
        ? { ok: false, retryable: false, error: new Error('refused') }
        : { ok: true };
    try {
      const ids = await genuine('handed', 3);
      const other = await genuine('after-handed');
      await waitFor(() => publisher.received.some((m) => m.eventId === other[0]), {
        what: 'the stream to go on past the refused aggregate',
      });
      await waitFor(
        async () =>
          (await admin.query(`SELECT 1 FROM "${SCHEMA}".events WHERE aggregate_id = 'handed'`)).rowCount ===
          3,
        { what: 'the refused aggregate in the table' },
      );
      const { rows } = await admin.query<{ event_id: string }>(
        `SELECT event_id FROM "${SCHEMA}".events WHERE aggregate_id = 'handed' ORDER BY sequence`,
      );
      expect(rows.map((r) => r.event_id)).toEqual(ids);
      expect(received('handed')).toEqual([]);
    } finally {
      publisher.verdict = () => ({ ok: true });
      await admin.query(`DELETE FROM "${SCHEMA}".events WHERE aggregate_id = 'handed'`);
    }
  });

  it('without its grant on wal_key the relay does not start, and the producer writes nothing; without a key, nothing either', async () => {
    await pools['migrator']!.query(
      `REVOKE SELECT ON "${SCHEMA}".wal_key FROM "${roles.relay}", "${roles.producer}"`,
    );
    try {
      const second = createCdcRelay({ pool: pools['relay']!, publisher, schema: SCHEMA, relayId: 'second' });
      await expect(second.start()).rejects.toMatchObject({
        code: 'TXO_NO_PRIVILEGE',
        message: expect.stringMatching(/may not read "forge_\w+"\.wal_key.*tx-outbox roles --print-sql/),
      });
      await second.stop();
      await expect(genuine('no-grant')).rejects.toMatchObject({ code: 'TXO_NO_PRIVILEGE' });
    } finally {
      await pools['migrator']!.query(
        `GRANT SELECT ON "${SCHEMA}".wal_key TO "${roles.relay}", "${roles.producer}"`,
      );
    }
    // The key's row deleted (by its owner): the statement fails, so no sequence is taken either.
    const { rows } = await admin.query(`DELETE FROM "${SCHEMA}".wal_key RETURNING *`);
    try {
      await expect(genuine('no-key')).rejects.toThrow(/wal_key table holds no key/);
      const seq = await admin.query(
        `SELECT 1 FROM "${SCHEMA}".aggregate_sequences WHERE aggregate_id = 'no-key'`,
      );
      expect(seq.rows).toEqual([]);
    } finally {
      const k = rows[0];
      await admin.query(
        `INSERT INTO "${SCHEMA}".wal_key (ipad, opad, created_lsn, created_at) VALUES ($1, $2, $3, $4)`,
        [k.ipad, k.opad, k.created_lsn, k.created_at],
      );
    }
    const id = await genuine('key-back');
    await waitFor(() => publisher.received.some((m) => m.eventId === id[0]), {
      what: 'delivery with the key back',
    });
  });

  it('tx-outbox roles --section wal: the forgers may no longer call pg_logical_emit_message; the producer and the relay still work', async () => {
    for (const statement of rolesSql({ schema: SCHEMA }).walMessages) await admin.query(statement);
    for (const forger of [pools['nobody']!, pools['consumer']!]) {
      await expect(
        forger.query(`SELECT pg_logical_emit_message(true, $1::text, 'x')`, [eventsPrefix(SCHEMA)]),
      ).rejects.toThrow(/permission denied for function pg_logical_emit_message/);
      await expect(
        forger.query(`SELECT pg_logical_emit_message(true, $1::text, '\\x00'::bytea)`, [
          eventsPrefix(SCHEMA),
        ]),
      ).rejects.toThrow(/permission denied for function pg_logical_emit_message/);
    }
    const id = await genuine('after-revoke');
    await waitFor(() => publisher.received.some((m) => m.eventId === id[0]), {
      what: 'a genuine event after the revoke',
    });
    // The relay's own messages (heartbeats) under its grant: no warning about them.
    await new Promise((r) => setTimeout(r, 700));
    expect(log.lines.filter((l) => /heartbeat/i.test(l.msg) && l.level !== 'debug')).toEqual([]);
  });
});
