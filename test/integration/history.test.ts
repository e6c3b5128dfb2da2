import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { Registry } from 'prom-client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { PublishError } from '../../src/errors.js';
import { findEvent } from '../../src/ops/find-event.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import { maintainHistory } from '../../src/relay/history.js';
import { createRelay, type Relay } from '../../src/relay/polling/relay.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { type LogLine, logRecorder } from '../helpers/log-recorder.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';
import { collectOutput } from '../helpers/processes.js';

const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
const execFileP = promisify(execFile);

let db: TestDb;
const relays: Relay[] = [];
beforeAll(async () => {
  db = await createTestDb('history', { partitions: 4 });
});
let logs: LogLine[] = [];
afterEach(async (ctx) => {
  // A failed test shows what its relays said.
  if (ctx.task.result?.state === 'fail') {
    console.error(
      logs
        .filter((l) => l.level !== 'debug')
        .map((l) => `${l.level} ${l.msg} ${(l.obj['err'] as Error | undefined)?.message ?? ''}`),
    );
  }
  logs = [];
  await Promise.all(relays.splice(0).map((r) => r.stop({ timeout: 2000 })));
  await db.pool.query(`DELETE FROM "${db.schema}".events`);
  await db.pool.query(`DELETE FROM "${db.schema}".aggregate_progress`);
  await db.pool.query(`DELETE FROM "${db.schema}".deliveries`);
});
afterAll(async () => {
  await db?.close();
});

function relay(publisher: RecordingPublisher, extra: Partial<Parameters<typeof createRelay>[0]> = {}): Relay {
  const recorder = logRecorder();
  logs = recorder.lines;
  const r = createRelay({
    pool: db.pool,
    publisher,
    schema: db.schema,
    pollIntervalMs: 50,
    leaseMs: 3000,
    history: true,
    logger: recorder.logger,
    ...extra,
  });
  relays.push(r);
  return r;
}

async function put(events: OutboxEvent[]): Promise<string[]> {
  const results = await inTransaction(db.pool, (tx) => enqueue(tx, events, { schema: db.schema }));
  return results.map((r) => r.eventId);
}

function ev(aggregateId: string, type = 't', extra: Partial<OutboxEvent> = {}): OutboxEvent {
  return { aggregateType: 'order', aggregateId, type, payload: { aggregateId }, ...extra };
}

async function partitions(): Promise<string[]> {
  const { rows } = await db.pool.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = '"${db.schema}".deliveries'::regclass ORDER BY 1`,
  );
  return rows.map((r) => r.name);
}

async function utcDay(offsetDays: number): Promise<string> {
  const { rows } = await db.pool.query<{ d: string }>(
    `SELECT to_char((now() AT TIME ZONE 'UTC')::date + $1::int, 'YYYYMMDD') AS d`,
    [offsetDays],
  );
  return rows[0]!.d;
}

async function stray(publishedAt: string): Promise<void> {
  await db.pool.query(
    `INSERT INTO "${db.schema}".deliveries (event_id, partition, aggregate_type, aggregate_id, sequence, event_type,
       created_at, published_at, attempts, relay_id, publisher)
     VALUES (gen_random_uuid(), 0, 'order', 'stray', 1, 't', now(), $1::timestamptz, 1, 'r', 'p')`,
    [publishedAt],
  );
}

describe('delivery history', () => {
  it('records every delivered event in the outcome statement: identity, timing, relay, publisher', async () => {
    const publisher = new RecordingPublisher();
    let failedOnce = false;
    publisher.verdict = (m) => {
      if (m.aggregateId === 'h2' && !failedOnce) {
        failedOnce = true;
        return { ok: false, retryable: true, error: new Error('try again') };
      }
      return { ok: true };
    };
    const ids = await put([ev('h1'), ev('h1', 'second', { topic: 'orders' }), ev('h2')]);
    const r = relay(publisher, { relayId: 'relay-h', backoff: { baseMs: 1, capMs: 2 } });
    await r.start();
    // start() waits for the first maintenance: today's partition exists before the first outcome
    // (one routed to DEFAULT while its day's partition is attached would fail and be retried).
    expect(await partitions()).toContain(`deliveries_p${await utcDay(0)}`);
    await waitFor(() => publisher.received.length === 3, { what: '3 deliveries' });
    await waitFor(
      async () =>
        (await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".deliveries`)).rows[0].n === 3,
      { what: '3 history rows' },
    );
    const { rows } = await db.pool.query(
      `SELECT event_id::text, aggregate_id, sequence::int, event_type, topic, attempts, relay_id, publisher,
              payload, published_at >= created_at AS ordered, tableoid::regclass::text AS part
       FROM "${db.schema}".deliveries ORDER BY aggregate_id, sequence`,
    );
    expect(
      rows.map((x) => [x.event_id, x.aggregate_id, x.sequence, x.event_type, x.topic, x.attempts]),
    ).toEqual([
      [ids[0], 'h1', 1, 't', null, 1],
      [ids[1], 'h1', 2, 'second', 'orders', 1],
      [ids[2], 'h2', 1, 't', null, 2],
    ]);
    for (const x of rows) {
      expect(x).toMatchObject({ relay_id: 'relay-h', publisher: 'recording', payload: null, ordered: true });
      // Maintenance at start created today's partition: nothing landed in DEFAULT.
      expect(x.part).toBe(`${db.schema}.deliveries_p${await utcDay(0)}`);
    }
  });

  it('a relay whose role may not INSERT into deliveries refuses to start, instead of republishing forever', async () => {
    const role = `txo_nohist_${randomBytes(4).toString('hex')}`;
    await db.pool.query(`CREATE ROLE ${role} LOGIN`);
    await db.pool.query(`GRANT USAGE ON SCHEMA "${db.schema}" TO ${role}`);
    await db.pool.query(`GRANT SELECT ON "${db.schema}".config TO ${role}`);
    const url = new URL(DATABASE_URL);
    url.username = role;
    url.password = '';
    const pool = new pg.Pool({ connectionString: url.toString(), max: 4 });
    try {
      const r = createRelay({ pool, publisher: new RecordingPublisher(), schema: db.schema, history: true });
      await expect(r.start()).rejects.toMatchObject({
        code: 'TXO_NO_PRIVILEGE',
        message: expect.stringContaining('may not INSERT into'),
      });
      await r.stop();
    } finally {
      await pool.end();
      await db.pool.query(`DROP OWNED BY ${role}`);
      await db.pool.query(`DROP ROLE ${role}`);
    }
  });

  it('keeps payloads only when asked', async () => {
    const publisher = new RecordingPublisher();
    await put([ev('pay')]);
    const r = relay(publisher, { history: { payloads: true } });
    await r.start();
    await waitFor(
      async () =>
        (await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".deliveries`)).rows[0].n === 1,
      { what: 'a history row' },
    );
    const { rows } = await db.pool.query(`SELECT payload FROM "${db.schema}".deliveries`);
    expect(rows[0].payload).toEqual({ aggregateId: 'pay' });
  });

  it('maintenance creates today and the days ahead, is idempotent, and drops days past the retention', async () => {
    // An old partition, as if left from 2020 (the function creates any day's).
    await db.pool.query(`SELECT "${db.schema}".history_add_partition('2020-01-01')`);
    const first = await maintainHistory(db.pool, { schema: db.schema, retentionDays: 7, aheadDays: 3 });
    expect(first.dropped).toEqual(['2020-01-01']);
    expect(first.deferred).toEqual([]);
    const names = await partitions();
    for (let d = 0; d <= 3; d++) expect(names).toContain(`deliveries_p${await utcDay(d)}`);
    expect(names).toContain('deliveries_default');
    expect(names).not.toContain('deliveries_p20200101');
    const again = await maintainHistory(db.pool, { schema: db.schema, retentionDays: 7, aheadDays: 3 });
    expect(again).toMatchObject({ created: [], dropped: [], moved: 0, purged: 0, partitions: names.length });
    // The function itself refuses to drop a day inside the retention.
    const { rows } = await db.pool.query(
      `SELECT "${db.schema}".history_drop_partition((now() AT TIME ZONE 'UTC')::date, 7) AS dropped`,
    );
    expect(rows[0].dropped).toBe(false);
    // …and a retention below a day, which would let a caller drop today's and future partitions.
    for (const sql of [
      `SELECT "${db.schema}".history_drop_partition((now() AT TIME ZONE 'UTC')::date, -3)`,
      `SELECT "${db.schema}".history_purge_default(-3)`,
    ])
      await expect(db.pool.query(sql)).rejects.toMatchObject({ code: '22023' });
  });

  it('with metrics, tx_outbox_history_partitions says how many partitions the history has', async () => {
    const registry = new Registry();
    const r = relay(new RecordingPublisher(), { metrics: registry });
    await r.start();
    const text = await registry.metrics();
    const line = text.split('\n').find((l) => l.startsWith('tx_outbox_history_partitions{'));
    expect(line).toBeDefined();
    expect(Number(line!.split(' ').at(-1))).toBe((await partitions()).length);
  });

  it('rows in DEFAULT for a day without a partition move into it when it is created; older ones are purged', async () => {
    await maintainHistory(db.pool, { schema: db.schema });
    const far = await utcDay(10); // beyond the days created ahead: lands in DEFAULT
    const farIso = `${far.slice(0, 4)}-${far.slice(4, 6)}-${far.slice(6)}T12:00:00Z`;
    await stray(farIso);
    await stray(farIso);
    await stray('2020-06-01T00:00:00Z'); // older than any retention
    const { rows: before } = await db.pool.query(
      `SELECT count(*)::int AS n FROM "${db.schema}".deliveries_default`,
    );
    expect(before[0].n).toBe(3);
    const done = await maintainHistory(db.pool, { schema: db.schema, retentionDays: 7, aheadDays: 3 });
    expect(done.created).toEqual([`${far.slice(0, 4)}-${far.slice(4, 6)}-${far.slice(6)}`]);
    expect(done).toMatchObject({ moved: 2, purged: 1, deferred: [] });
    const { rows: after } = await db.pool.query(
      `SELECT tableoid::regclass::text AS part FROM "${db.schema}".deliveries`,
    );
    expect(after.map((r) => r.part)).toEqual([
      `${db.schema}.deliveries_p${far}`,
      `${db.schema}.deliveries_p${far}`,
    ]);
  });

  it('a missing partition never fails the outcome: the rows land in DEFAULT, and move on the next run', async () => {
    await maintainHistory(db.pool, { schema: db.schema });
    await db.pool.query(`DROP TABLE "${db.schema}".deliveries_p${await utcDay(0)}`);
    const publisher = new RecordingPublisher();
    const r = relay(publisher, { history: { maintenanceIntervalMs: 3_600_000 }, relayId: 'r2' });
    // Holds the maintenance lock, so the relay's start-up run gives up (lock timeout) and today stays missing.
    const blocker = await db.pool.connect();
    let id: string | undefined;
    try {
      await blocker.query('BEGIN');
      await blocker.query(`SELECT pg_advisory_xact_lock(hashtextextended('tx-outbox:history:' || $1, 0))`, [
        `"${db.schema}"`,
      ]);
      await r.start();
      [id] = await put([ev('missing')]);
      await waitFor(() => publisher.received.length === 1, { what: 'the delivery' });
      await waitFor(
        async () =>
          (await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".deliveries_default`)).rows[0]
            .n === 1,
        { what: 'a row in DEFAULT' },
      );
      await waitFor(() => logs.some((l) => l.msg.startsWith('delivery history: a lock was not granted')), {
        what: 'the start-up maintenance to give up',
      });
      await blocker.query('COMMIT');
    } finally {
      blocker.release();
    }
    expect(await partitions()).not.toContain(`deliveries_p${await utcDay(0)}`);
    const done = await maintainHistory(db.pool, { schema: db.schema });
    expect(done).toMatchObject({ moved: 1, created: [expect.any(String)] });
    const found = await findEvent(db.pool, id!, { schema: db.schema });
    expect(found).toMatchObject({ state: 'published', relayId: 'r2' });
  });

  it('DDL that cannot get its lock in time is deferred, never queued behind (and ahead of) outcome statements', async () => {
    await maintainHistory(db.pool, { schema: db.schema });
    await db.pool.query(`SELECT "${db.schema}".history_add_partition('2020-01-02')`);
    // A transaction holding the parent like an outcome statement in flight does (ROW EXCLUSIVE;
    // ONLY: an outcome locks the partitions it writes to, not all of them as LOCK TABLE would).
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`LOCK TABLE ONLY "${db.schema}".deliveries IN ROW EXCLUSIVE MODE`);
      const done = await maintainHistory(db.pool, { schema: db.schema });
      expect(done.deferred).toEqual(['drop 2020-01-02']);
      expect(await partitions()).toContain('deliveries_p20200102');
      await holder.query('COMMIT');
    } finally {
      holder.release();
    }
    const done = await maintainHistory(db.pool, { schema: db.schema });
    expect(done.dropped).toEqual(['2020-01-02']);
  });
});

describe('findEvent', () => {
  it('pending with no relay: its partition has no owner; deliverAfter in the future says so', async () => {
    const [due, later] = await put([
      ev('p1'),
      ev('p2', 't', { deliverAfter: new Date(Date.now() + 3_600_000) }),
    ]);
    const a = await findEvent(db.pool, due!, { schema: db.schema });
    expect(a).toMatchObject({
      state: 'pending',
      attempts: 0,
      event: { aggregateType: 'order', aggregateId: 'p1', sequence: 1 },
    });
    expect(a.state === 'pending' && a.waitingFor.map((w) => w.kind)).toEqual(['no-owner']);
    const b = await findEvent(db.pool, later!.toUpperCase(), { schema: db.schema });
    expect(b.state === 'pending' && b.waitingFor.map((w) => w.kind)).toEqual(['deliver-after', 'no-owner']);
  });

  it('an aggregate that starts above the sequence floor (after a prune) is not reported as a gap', async () => {
    await db.pool.query(`SELECT setval('${db.schema}.sequence_floor', 1000)`);
    const [first, second] = await put([ev('after-prune'), ev('after-prune')]);
    const a = await findEvent(db.pool, first!, { schema: db.schema });
    expect(a).toMatchObject({ state: 'pending', event: { sequence: 1001, sequenceBase: 1000 } });
    expect(a.state === 'pending' && a.waitingFor.map((w) => w.kind)).toEqual(['no-owner']);
    const b = await findEvent(db.pool, second!, { schema: db.schema });
    expect(b.state === 'pending' && b.waitingFor.map((w) => w.kind)).toEqual(['behind', 'no-owner']);
    // The other tests expect aggregates to start at 1.
    await db.pool.query(`ALTER SEQUENCE "${db.schema}".sequence_floor RESTART`);
  });

  it('held behind a dead event of its aggregate; the dead one says what it holds back; published from the history', async () => {
    const publisher = new RecordingPublisher();
    publisher.verdict = (m) =>
      m.type === 'poison'
        ? { ok: false, retryable: false, error: new PublishError('schema mismatch', { retryable: false }) }
        : { ok: true };
    const [ok, poison, held1, held2] = await put([
      ev('42', 'fine'),
      ev('42', 'poison'),
      ev('42', 'after'),
      ev('42', 'after'),
    ]);
    const r = relay(publisher, { relayId: 'relay-f' });
    await r.start();
    await waitFor(async () => (await findEvent(db.pool, poison!, { schema: db.schema })).state === 'dead', {
      what: 'a dead event',
    });
    const dead = await findEvent(db.pool, poison!, { schema: db.schema });
    expect(dead).toMatchObject({ state: 'dead', attempts: 1, blocking: 2, event: { sequence: 2 } });
    expect(dead.state === 'dead' && dead.lastError).toMatch(/schema mismatch/);
    const held = await findEvent(db.pool, held2!, { schema: db.schema });
    expect(held.state).toBe('pending');
    if (held.state !== 'pending') return;
    expect(held.waitingFor).toEqual([
      expect.objectContaining({ kind: 'behind', eventId: poison, sequence: 2, status: 'dead', earlier: 2 }),
    ]);
    expect(held.waitingFor[0]!.kind === 'behind' && held.waitingFor[0]!.since).toBeInstanceOf(Date);
    expect((await findEvent(db.pool, held1!, { schema: db.schema })).state).toBe('pending');
    await waitFor(async () => (await findEvent(db.pool, ok!, { schema: db.schema })).state === 'published');
    expect(await findEvent(db.pool, ok!, { schema: db.schema })).toMatchObject({
      state: 'published',
      relayId: 'relay-f',
      publisher: 'recording',
      attempts: 1,
      event: { aggregateId: '42', sequence: 1, type: 'fine' },
    });
  });

  it('backing off: its retry time; replayed and skipped from the audit trail; unknown says why', async () => {
    const publisher = new RecordingPublisher();
    publisher.verdict = () => ({ ok: false, retryable: true, error: new Error('busy') });
    const [retrying] = await put([ev('b1')]);
    const r = relay(publisher, { backoff: { baseMs: 3_600_000, capMs: 3_600_000 }, random: () => 0.99 });
    await r.start();
    await waitFor(async () => {
      const l = await findEvent(db.pool, retrying!, { schema: db.schema });
      return l.state === 'pending' && l.attempts === 1;
    });
    const l = await findEvent(db.pool, retrying!, { schema: db.schema });
    expect(l.state === 'pending' && l.waitingFor.map((w) => w.kind)).toEqual(['backoff']);
    expect(l.state === 'pending' && l.lastError).toBe('busy');

    const gone = '01900000-0000-7000-8000-000000000001';
    const skipped = '01900000-0000-7000-8000-000000000002';
    await db.pool.query(
      `INSERT INTO "${db.schema}".audit (actor, action, event_ids, reason) VALUES
         ('ops', 'replay', ARRAY[$1::uuid], 'fixed'), ('ops', 'skip', ARRAY[$2::uuid], 'obsolete')`,
      [gone, skipped],
    );
    expect(await findEvent(db.pool, gone, { schema: db.schema })).toMatchObject({
      state: 'replayed',
      audit: [{ actor: 'ops', action: 'replay', reason: 'fixed' }],
    });
    expect(await findEvent(db.pool, skipped, { schema: db.schema })).toMatchObject({ state: 'skipped' });
    const unknown = await findEvent(db.pool, '01900000-0000-7000-8000-0000000000ff', { schema: db.schema });
    expect(unknown).toMatchObject({ state: 'unknown', history: { present: true, empty: true } });
    await expect(findEvent(db.pool, 'nope', { schema: db.schema })).rejects.toMatchObject({
      field: 'eventId',
    });
  });

  it('tx-outbox event: human text, --json, and exit 3 for an event found nowhere', async () => {
    if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
    const [id] = await put([ev('cli')]);
    const env = { ...process.env, DATABASE_URL };
    const text = await execFileP(process.execPath, [CLI, 'event', id!, '--schema', db.schema], { env });
    expect(text.stdout).toContain(`Event ${id}: pending`);
    expect(text.stdout).toContain('order/cli #1');
    expect(text.stdout).toMatch(/its partition \d+ has no owner/);
    const json = await execFileP(process.execPath, [CLI, 'event', id!, '--json', '--schema', db.schema], {
      env,
    });
    expect(JSON.parse(json.stdout)).toMatchObject({
      eventId: id,
      state: 'pending',
      waitingFor: [{ kind: 'no-owner' }],
    });
    await expect(
      execFileP(
        process.execPath,
        [CLI, 'event', '01900000-0000-7000-8000-0000000000ee', '--schema', db.schema],
        {
          env,
        },
      ),
    ).rejects.toMatchObject({ code: 3, stdout: expect.stringMatching(/unknown/) });
  });

  it('tx-outbox relay --history-days records deliveries; the event command then says published', async () => {
    if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(204).end());
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
    const env = {
      ...process.env,
      DATABASE_URL,
      TX_OUTBOX_WEBHOOK_SECRET: `whsec_${randomBytes(24).toString('base64')}`,
    };
    const child = spawn(
      process.execPath,
      [CLI, 'relay', '--schema', db.schema, '--webhook', url, '--history-days', '2', '--relay-id', 'cli-h'],
      { env, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const output = collectOutput(child);
    try {
      const [id] = await put([ev('via-cli')]);
      await waitFor(
        async () => (await findEvent(db.pool, id!, { schema: db.schema })).state === 'published',
        {
          what: 'the delivery recorded by the CLI relay',
        },
      );
      const shown = await execFileP(process.execPath, [CLI, 'event', id!, '--schema', db.schema], { env });
      expect(shown.stdout).toMatch(/: published\n/);
      expect(shown.stdout).toContain('by relay cli-h to webhook');
    } finally {
      child.kill('SIGTERM');
      const done = await output.done;
      server.close();
      expect(done.code, done.stderr).toBe(0);
    }
  });
});
