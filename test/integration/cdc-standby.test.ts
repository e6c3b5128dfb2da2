// The CDC relay next to polling relays, a relay that cannot stream, and where a new stream starts
// (review rev-takeover findings 1, 2a, 2b, 3; the lost slot is test/failure/cdc-slot-lost.test.ts).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CdcRelay, createCdcRelay } from '../../src/cdc/relay.js';
import { ReplicationStream } from '../../src/cdc/replication.js';
import { cdcNames, ensureCdcSlot, resolveCdcNames } from '../../src/cdc/setup.js';
import { NOOP_RELAY_METRICS } from '../../src/metrics/relay-metrics.js';
import { enqueue } from '../../src/producer/enqueue.js';
import { PartitionLeases } from '../../src/relay/leases.js';
import { quoteSchema } from '../../src/schema/identifiers.js';
import { TcpProxy } from '../../src/testing/tcp-proxy.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { logRecorder } from '../helpers/log-recorder.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';
import { dropSlotQuietly } from '../helpers/slot-holder.js';

const PARTITIONS = 4;
const ROLE = `cdc_fixops_norep_${randomBytes(3).toString('hex')}`;
let db: TestDb;
const pools: pg.Pool[] = [];
const relays: CdcRelay[] = [];

beforeAll(async () => {
  db = await createTestDb('cdc_fixops', { partitions: PARTITIONS });
  await ensureCdcSlot(db.pool, { schema: db.schema });
});

afterAll(async () => {
  await Promise.all(relays.map((r) => r.stop({ timeout: 2000 }).catch(() => undefined)));
  await Promise.all(pools.map((p) => p.end()));
  const names = await resolveCdcNames(db.pool, { schema: db.schema });
  await dropSlotQuietly(db.pool, names.slot);
  await db.pool.query(`DROP PUBLICATION IF EXISTS "${names.publication}"`);
  await db.close();
  const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
  await admin.query(`DROP OWNED BY ${ROLE}`).catch(() => undefined);
  await admin.query(`DROP ROLE IF EXISTS ${ROLE}`);
  await admin.end();
});

function ownPool(url = DATABASE_URL, max = 8): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max });
  pools.push(pool);
  return pool;
}

async function reset(): Promise<void> {
  await Promise.all(relays.splice(0).map((r) => r.stop({ timeout: 2000 })));
  await db.pool.query(`UPDATE "${db.schema}".partitions SET owner = NULL, lease_until = '-infinity'`);
  await db.pool.query(`DELETE FROM "${db.schema}".relays`);
  await db.pool.query(`DELETE FROM "${db.schema}".events`);
}

async function liveOwners(): Promise<Record<string, number>> {
  const { rows } = await db.pool.query<{ owner: string; n: number }>(
    `SELECT coalesce(CASE WHEN lease_until >= now() THEN owner END, '(nobody)') AS owner, count(*)::int AS n
     FROM "${db.schema}".partitions GROUP BY 1`,
  );
  return Object.fromEntries(rows.map((r) => [r.owner, r.n]));
}

const one = (id: string) =>
  inTransaction(db.pool, (tx) =>
    enqueue(tx, [{ aggregateType: 'order', aggregateId: id, type: 'created', payload: {} }], {
      schema: db.schema,
    }),
  );

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('CDC relay: standing by, start position, checks', () => {
  it('a polling relay next to a standby CDC relay keeps every partition; the CDC relay says why, once', async () => {
    await reset();
    const { lines, logger } = logRecorder();
    const mk = (id: string, exclusive: boolean) =>
      new PartitionLeases(
        ownPool(),
        quoteSchema(db.schema),
        id,
        60_000,
        async () => PARTITIONS,
        logger,
        NOOP_RELAY_METRICS,
        { exclusive },
      );
    const poll = mk('poll', false);
    const cdc = mk('cdc', true);
    await poll.rebalance();
    for (let i = 0; i < 5; i++) {
      await cdc.rebalance();
      await poll.rebalance();
    }
    expect(await liveOwners()).toEqual({ poll: PARTITIONS });
    const { rows } = await db.pool.query(`SELECT relay_id, kind FROM "${db.schema}".relays ORDER BY 1`);
    expect(rows).toEqual([
      { relay_id: 'cdc', kind: 'cdc' },
      { relay_id: 'poll', kind: 'poll' },
    ]);
    const errors = lines.filter((l) => l.level === 'error' && /must not share a schema/.test(l.msg));
    expect(errors).toHaveLength(1);
  });

  it('a role without REPLICATION is refused at start with TXO_CDC_NO_REPLICATION and the ALTER ROLE fix', async () => {
    await reset();
    await db.pool.query(`CREATE ROLE ${ROLE} LOGIN`);
    await db.pool.query(`GRANT USAGE ON SCHEMA "${db.schema}" TO ${ROLE}`);
    await db.pool.query(
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "${db.schema}" TO ${ROLE}`,
    );
    const url = new URL(DATABASE_URL);
    url.username = ROLE;
    const bad = createCdcRelay({
      schema: db.schema,
      pool: ownPool(url.toString()),
      publisher: new RecordingPublisher(),
      relayId: 'norep',
      logger: logRecorder().logger,
    });
    relays.push(bad);
    const error = await bad.start().then(
      () => undefined,
      (e: unknown) => e as Error & { code?: string },
    );
    expect(error?.code).toBe('TXO_CDC_NO_REPLICATION');
    expect(error?.message).toContain(`ALTER ROLE "${ROLE}" REPLICATION`);
    expect(await liveOwners()).toEqual({ '(nobody)': PARTITIONS });
  });

  it('a relay whose replication network is black-holed gives its leases to a standby that can stream', async () => {
    await reset();
    const url = new URL(DATABASE_URL);
    const proxy = await TcpProxy.start({ host: url.hostname, port: Number(url.port || 5432) });
    try {
      const common = {
        schema: db.schema,
        leaseMs: 3000,
        heartbeatMs: 500,
        silenceTimeoutMs: 2000,
        pollIntervalMs: 50,
      };
      const { lines, logger } = logRecorder();
      const a = new RecordingPublisher();
      const held = createCdcRelay({
        ...common,
        pool: ownPool(),
        publisher: a,
        relayId: 'held',
        logger,
        connection: {
          host: '127.0.0.1',
          port: proxy.address.port,
          user: url.username,
          database: url.pathname.slice(1),
        },
      });
      relays.push(held);
      await held.start();
      await waitFor(() => held.stats().cdc.streaming, { what: 'held streams' });
      proxy.stall(); // the replication connection, and every new one through the proxy, goes silent
      const b = new RecordingPublisher();
      const standby = createCdcRelay({ ...common, pool: ownPool(), publisher: b, relayId: 'standby' });
      relays.push(standby);
      await standby.start();
      await one('bh');
      await waitFor(() => b.received.length === 1, { timeoutMs: 20_000, what: 'the standby delivers' });
      expect(a.received).toHaveLength(0);
      expect(await liveOwners()).toEqual({ standby: PARTITIONS });
      expect(held.stats().cdc.streaming).toBe(false);
      // One error line with the cause, not one per attempt (reminders come at most every 30 s).
      const errors = lines.filter((l) => l.level === 'error');
      expect(errors.length).toBeLessThanOrEqual(2);
    } finally {
      await proxy.resume();
      await proxy.close();
    }
  }, 40_000);

  it('a new stream starts from the relay’s own confirmed position: no replay after a walsender kill', async () => {
    await reset();
    const names = await resolveCdcNames(db.pool, { schema: db.schema });
    const publisher = new RecordingPublisher();
    // The server learns the confirmed position only once a minute: after a kill it knows an old one.
    const relay = createCdcRelay({
      schema: db.schema,
      pool: ownPool(),
      publisher,
      relayId: 'own-position',
      statusIntervalMs: 60_000,
      heartbeatMs: 500,
      silenceTimeoutMs: 5000,
      leaseMs: 3000,
    });
    relays.push(relay);
    await relay.start();
    await waitFor(() => relay.stats().cdc.streaming, { what: 'streaming' });
    for (let i = 0; i < 10; i++) await one(`pos-${i}`);
    await waitFor(() => publisher.received.length === 10, { what: '10 delivered' });
    await sleep(300);
    await db.pool.query(
      'SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1',
      [names.slot],
    );
    await waitFor(() => relay.stats().cdc.reconnects >= 1 && relay.stats().cdc.streaming, {
      what: 'reconnected',
    });
    await one('pos-after');
    await waitFor(() => publisher.received.some((m) => m.aggregateId === 'pos-after'), {
      what: 'the next one',
    });
    await sleep(500);
    expect(publisher.received.map((m) => m.aggregateId)).toEqual([
      ...Array.from({ length: 10 }, (_, i) => `pos-${i}`),
      'pos-after',
    ]);
  }, 30_000);

  it('the server honours a start position past the slot’s confirmed_flush_lsn', async () => {
    await reset();
    const slot = `txo_fixops_start_${randomBytes(3).toString('hex')}`;
    const names = cdcNames({ schema: db.schema });
    await db.pool.query(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, [slot]);
    try {
      for (const body of ['first', 'second']) {
        await db.pool.query(`SELECT pg_logical_emit_message(true, 'fixops-start', $1::text)`, [body]);
      }
      const read = async (startLsn?: bigint) => {
        const stream = new ReplicationStream({
          connection: { connectionString: DATABASE_URL },
          slot,
          publication: names.publication,
          statusIntervalMs: 60_000,
          ...(startLsn === undefined ? {} : { startLsn }),
        });
        await stream.start();
        const seen: { body: string; commitEnd: bigint }[] = [];
        let body: string | undefined;
        while (seen.length < (startLsn === undefined ? 2 : 1)) {
          for (const c of await stream.next(100)) {
            const m = c.message;
            if (m.tag === 'message' && m.prefix === 'fixops-start') body = m.content.toString();
            if (m.tag === 'commit' && body !== undefined) {
              seen.push({ body, commitEnd: m.endLsn });
              body = undefined;
            }
          }
        }
        // Nothing else comes: the first transaction was skipped, not merely late.
        const more = await Promise.race([stream.next(100), sleep(700).then(() => [])]);
        await stream.close();
        return {
          seen,
          more: more.filter((c) => c.message.tag === 'message' && c.message.prefix === 'fixops-start'),
        };
      };
      const all = await read();
      expect(all.seen.map((s) => s.body)).toEqual(['first', 'second']);
      const { rows } = await db.pool.query<{ lsn: string }>(
        'SELECT confirmed_flush_lsn::text AS lsn FROM pg_replication_slots WHERE slot_name = $1',
        [slot],
      );
      const later = await read(all.seen[0]!.commitEnd);
      expect(later.seen.map((s) => s.body)).toEqual(['second']);
      expect(later.more).toEqual([]);
      // …and the slot itself was still behind the first transaction.
      expect(rows[0]!.lsn).toBeDefined();
    } finally {
      await dropSlotQuietly(db.pool, slot);
    }
  }, 30_000);
});
