import { execFile } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PublishError } from '../../src/errors.js';
import { createInbox } from '../../src/inbox/inbox.js';
import type { InboxMessage } from '../../src/inbox/message.js';
import { listQuarantine, pruneInbox, releaseQuarantined } from '../../src/inbox/quarantine.js';
import { listDead, replayDead } from '../../src/ops/dead-letter.js';
import { showEvent } from '../../src/ops/dead-show.js';
import { skipDead } from '../../src/ops/dead-skip.js';
import { findEvent } from '../../src/ops/find-event.js';
import { outboxStatus } from '../../src/ops/status.js';
import { enqueue } from '../../src/producer/enqueue.js';
import { createRelay, type Relay } from '../../src/relay/polling/relay.js';
import { migrate, migrationSql } from '../../src/schema/migrate.js';
import { ROLE_KINDS, type RoleKind, rolesSql } from '../../src/schema/roles.js';
import { inTransaction, waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

/**
 * Least privilege, on the real PostgreSQL: the SQL `tx-outbox roles --print-sql` prints creates
 * the group roles of a scratch schema; LOGIN members of each run what that role is for (migrate,
 * enqueue, a relay, an inbox consumer, the operator's commands) and nothing more. Roles are
 * cluster-wide: their names carry this run's random schema name, and afterAll drops them.
 */
const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
const run = promisify(execFile);
const SCHEMA = `t_roles_${randomBytes(4).toString('hex')}`;
const roles = rolesSql({ schema: SCHEMA }).roles;
const login = (kind: RoleKind) => `${roles[kind]}_login`;

let admin: pg.Pool;
const pools = new Map<RoleKind, pg.Pool>();
const relays: Relay[] = [];

/**
 * The database URL of `kind`'s LOGIN member (the local server trusts loopback: no password).
 * The migrator's sets its role in the URL, as docs/operations.md says, so it owns what it creates.
 */
function urlOf(kind: RoleKind): string {
  const url = new URL(DATABASE_URL);
  url.username = login(kind);
  url.password = '';
  if (kind === 'migrator') url.searchParams.set('options', `-c role=${roles.migrator}`);
  return url.toString();
}

/** A pool logged in as the LOGIN member of `kind`'s group. */
function poolFor(kind: RoleKind): pg.Pool {
  const pool = new pg.Pool({ connectionString: urlOf(kind), max: 5 });
  pool.on('error', () => {});
  return pool;
}

function as(kind: RoleKind): pg.Pool {
  const pool = pools.get(kind);
  if (!pool) throw new Error(`no pool for ${kind}`);
  return pool;
}

async function printedSql(section: 'setup' | 'grants'): Promise<string> {
  const { stdout } = await run(process.execPath, [
    CLI,
    'roles',
    '--print-sql',
    '--schema',
    SCHEMA,
    '--section',
    section,
  ]);
  return stdout;
}

async function grant(): Promise<void> {
  await as('migrator').query(await printedSql('grants'));
}

function event(aggregateId: string, type = 'order.placed') {
  return { aggregateType: 'order', aggregateId, type, payload: { aggregateId, secret: 'card' } };
}

function message(aggregateId: string, sequence: number, type = 'order.placed'): InboxMessage {
  return {
    eventId: randomUUID(),
    type,
    aggregateType: 'order',
    aggregateId,
    sequence,
    schemaVersion: 1,
    payload: Buffer.from(JSON.stringify({ sequence })),
    headers: {},
  };
}

async function hotEvents(): Promise<number> {
  const { rows } = await admin.query(`SELECT count(*)::int AS n FROM "${SCHEMA}".events`);
  return rows[0].n;
}

beforeAll(async () => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  await admin.query(await printedSql('setup'));
  for (const kind of ROLE_KINDS) {
    await admin.query(`CREATE ROLE "${login(kind)}" LOGIN IN ROLE "${roles[kind]}"`);
    pools.set(kind, poolFor(kind));
  }
});

afterAll(async () => {
  // Roles outlive the database objects (they are cluster-wide): dropped even when a test failed.
  await Promise.allSettled(relays.map((r) => r.stop({ timeout: 2000 })));
  await Promise.allSettled([...pools.values()].map((p) => p.end()));
  if (!admin) return;
  const all = ROLE_KINDS.flatMap((kind) => [login(kind), roles[kind]]);
  try {
    await admin.query(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
  } finally {
    const existing = await admin.query<{ rolname: string }>(
      'SELECT rolname FROM pg_roles WHERE rolname = ANY ($1)',
      [all],
    );
    const names = existing.rows.map((r) => `"${r.rolname}"`);
    if (names.length > 0) await admin.query(`DROP OWNED BY ${names.join(', ')}`);
    for (const role of all) await admin.query(`DROP ROLE IF EXISTS "${role}"`);
    await admin.end();
  }
});

describe('least-privilege roles', () => {
  it('the migrator creates the schema it owns without any right on the database', async () => {
    const { rows } = await admin.query(
      `SELECT has_database_privilege($1, current_database(), 'CREATE') AS create_db`,
      [roles.migrator],
    );
    expect(rows[0].create_db).toBe(false);
    const result = await migrate(as('migrator'), { schema: SCHEMA });
    expect(result.applied).toEqual(migrationSql().map((m) => m.version));
    const owners = await admin.query<{ owner: string }>(
      `SELECT DISTINCT tableowner AS owner FROM pg_tables WHERE schemaname = $1`,
      [SCHEMA],
    );
    expect(owners.rows.map((r) => r.owner)).toEqual([roles.migrator]);
    await grant();
    await grant(); // idempotent
  });

  it('migrate(pool) on an up-to-date schema needs no DDL right: every runtime role may call it', async () => {
    for (const kind of ['producer', 'relay', 'consumer', 'operator'] as const) {
      const result = await migrate(as(kind), { schema: SCHEMA, partitions: 16 });
      expect(result.applied).toEqual([]);
    }
  });

  it('with a migration pending, a runtime role cannot apply it: a clear permission error', async () => {
    const last = migrationSql().at(-1)!.version;
    await admin.query(`DELETE FROM "${SCHEMA}".migrations WHERE version = $1`, [last]);
    try {
      await expect(migrate(as('producer'), { schema: SCHEMA })).rejects.toThrow(
        /permission denied for schema/,
      );
      expect((await migrate(as('migrator'), { schema: SCHEMA })).applied).toEqual([last]);
    } finally {
      await admin.query(
        `INSERT INTO "${SCHEMA}".migrations (version, name) VALUES ($1, 'x') ON CONFLICT DO NOTHING`,
        [last],
      );
    }
  });

  it('the producer enqueues (one and a batch) and reads no payload', async () => {
    const one = await inTransaction(as('producer'), (tx) => enqueue(tx, event('p1'), { schema: SCHEMA }));
    expect(one.sequence).toBe(1);
    const many = await inTransaction(as('producer'), (tx) =>
      enqueue(tx, [event('p1'), event('p2')], { schema: SCHEMA }),
    );
    expect(many.map((r) => r.sequence)).toEqual([2, 1]);
    const unprepared = await inTransaction(as('producer'), (tx) =>
      enqueue(tx, event('p3'), { schema: SCHEMA, prepared: false, notify: false }),
    );
    expect(unprepared.sequence).toBe(1);
    await expect(as('producer').query(`SELECT payload FROM "${SCHEMA}".events`)).rejects.toThrow(
      /permission denied for table events/,
    );
    await expect(as('producer').query(`DELETE FROM "${SCHEMA}".events`)).rejects.toThrow(
      /permission denied for table events/,
    );
    await expect(as('producer').query(`SELECT * FROM "${SCHEMA}".inbox`)).rejects.toThrow(
      /permission denied for table inbox/,
    );
  });

  it('without the column grant a batch RETURNING needs, enqueue fails with a permission error and writes nothing', async () => {
    await as('migrator').query(`REVOKE SELECT (sequence) ON "${SCHEMA}".events FROM "${roles.producer}"`);
    try {
      const before = await hotEvents();
      await expect(
        inTransaction(as('producer'), (tx) => enqueue(tx, [event('p9'), event('p9b')], { schema: SCHEMA })),
      ).rejects.toMatchObject({ code: '42501' });
      expect(await hotEvents()).toBe(before);
    } finally {
      await grant();
    }
  });

  it('the relay delivers, retries and kills events; the operator sees them and replays the dead', async () => {
    const publisher = new RecordingPublisher();
    publisher.verdict = (m) =>
      m.type === 'order.poison'
        ? { ok: false, retryable: false, error: new PublishError('rejected', { retryable: false }) }
        : { ok: true };
    const relay = createRelay({
      pool: as('relay'),
      publisher,
      schema: SCHEMA,
      pollIntervalMs: 50,
      leaseMs: 3000,
      backlogIntervalMs: 300,
    });
    relays.push(relay);
    await relay.start();
    // The relay role publishes the backlog; the producer role reads it for maxPending.
    await waitFor(async () => (await admin.query(`SELECT 1 FROM "${SCHEMA}".backlog`)).rowCount === 1, {
      what: 'the relay publishing the backlog',
    });
    await inTransaction(as('producer'), (tx) =>
      enqueue(tx, [event('r1'), event('r2', 'order.poison'), event('r2')], {
        schema: SCHEMA,
        maxPending: 1000,
      }),
    );
    await waitFor(async () => (await hotEvents()) === 2, { what: 'all but the dead event and its follower' });
    expect(publisher.received.map((m) => m.aggregateId)).toContain('r1');
    await waitFor(async () => (await listDead(as('operator'), { schema: SCHEMA })).length === 1, {
      what: 'the dead event',
    });

    const status = await run(process.execPath, [CLI, 'status', '--json', '--schema', SCHEMA], {
      env: { ...process.env, DATABASE_URL: urlOf('operator') },
    });
    const parsed = JSON.parse(status.stdout) as { dead: number; relays: unknown[] };
    expect(parsed.dead).toBe(1);
    expect(parsed.relays).toHaveLength(1);
    const deadList = await run(process.execPath, [CLI, 'dead', 'list', '--json', '--schema', SCHEMA], {
      env: { ...process.env, DATABASE_URL: urlOf('operator') },
    });
    expect(deadList.stdout).toContain('order.poison');
    expect(relay.stats().dead).toBe(1);

    publisher.verdict = () => ({ ok: true });
    const [dead] = await listDead(as('operator'), { schema: SCHEMA });
    const replayed = await replayDead(as('operator'), {
      schema: SCHEMA,
      eventIds: [dead!.eventId],
      reason: 'fixed the receiver',
    });
    expect(replayed).toEqual([dead!.eventId]);
    await waitFor(async () => (await hotEvents()) === 0, { what: 'the replayed events delivered' });
    expect((await outboxStatus(as('relay'), { schema: SCHEMA })).dead).toBe(0);
    await relay.stop({ timeout: 5000 });
    const held = await admin.query(
      `SELECT count(*)::int AS n FROM "${SCHEMA}".partitions WHERE owner IS NOT NULL`,
    );
    expect(held.rows[0].n).toBe(0);
  });

  it('the relay marks a repeated caller version dead and bridges a gap (sequence_base) with its own grants', async () => {
    const publisher = new RecordingPublisher();
    const relay = createRelay({
      pool: as('relay'),
      publisher,
      schema: SCHEMA,
      pollIntervalMs: 50,
      leaseMs: 3000,
      gapGraceMs: 50,
    });
    relays.push(relay);
    // Caller versions 1, 1 (a repeat) and 3 (2 skipped), written as enqueue({ sequence }) does.
    for (const sequence of [1, 1, 3]) {
      await admin.query(
        `INSERT INTO "${SCHEMA}".events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload)
         VALUES (gen_random_uuid(), ((hashtextextended('order' || chr(31) || 'cv', 0) & 9223372036854775807)
                 % (SELECT partitions FROM "${SCHEMA}".config))::smallint, 'order', 'cv', $1, 'order.changed', '{}')`,
        [sequence],
      );
    }
    await relay.start();
    await waitFor(() => publisher.received.filter((m) => m.aggregateId === 'cv').length === 2, {
      what: 'versions 1 and 3',
    });
    const sent = publisher.received.filter((m) => m.aggregateId === 'cv');
    expect(sent.map((m) => [m.sequence, m.sequenceBase])).toEqual([
      [1, undefined],
      [3, 2],
    ]);
    expect(relay.stats()).toMatchObject({ dead: 1, gapsBridged: 1 });
    await relay.stop({ timeout: 5000 });
    await admin.query(`DELETE FROM "${SCHEMA}".events WHERE aggregate_id = 'cv'`);
  });

  it('the operator skips dead events, with a marker the relay delivers and without one, and shows them', async () => {
    const publisher = new RecordingPublisher();
    publisher.verdict = (m) =>
      m.type === 'order.poison'
        ? { ok: false, retryable: false, error: new PublishError('rejected', { retryable: false }) }
        : { ok: true };
    const relay = createRelay({
      pool: as('relay'),
      publisher,
      schema: SCHEMA,
      pollIntervalMs: 50,
      leaseMs: 3000,
    });
    relays.push(relay);
    await relay.start();
    await inTransaction(as('producer'), (tx) =>
      enqueue(tx, [event('k1', 'order.poison'), event('k1'), event('k2', 'order.poison'), event('k2')], {
        schema: SCHEMA,
      }),
    );
    await waitFor(async () => (await listDead(as('operator'), { schema: SCHEMA })).length === 2, {
      what: 'two dead events',
    });
    const dead = await listDead(as('operator'), { schema: SCHEMA });
    const k1 = dead.find((e) => e.aggregateId === 'k1')!.eventId;
    const k2 = dead.find((e) => e.aggregateId === 'k2')!.eventId;
    await skipDead(as('operator'), { schema: SCHEMA, eventIds: [k1], reason: 'compensated' });
    await skipDead(as('operator'), { schema: SCHEMA, eventIds: [k2], reason: 'compensated', publish: false });
    await waitFor(async () => (await hotEvents()) === 0, { what: 'the marker and the followers delivered' });
    expect(publisher.received.filter((m) => m.aggregateId === 'k1').map((m) => m.type)).toEqual([
      'tx-outbox.skipped',
      'order.placed',
    ]);
    expect(publisher.received.filter((m) => m.aggregateId === 'k2').map((m) => m.sequence)).toEqual([2]);
    const shown = await showEvent(as('operator'), { schema: SCHEMA, eventId: k2 });
    expect(shown.audit.map((a) => a.action)).toEqual(['skip-unpublished']);
    await relay.stop({ timeout: 5000 });
  });

  it('with history on, the relay records deliveries and maintains the partitions it does not own; the operator finds events', async () => {
    const publisher = new RecordingPublisher();
    const relay = createRelay({
      pool: as('relay'),
      publisher,
      schema: SCHEMA,
      pollIntervalMs: 50,
      leaseMs: 3000,
      history: true,
    });
    relays.push(relay);
    await relay.start();
    const [sent] = await inTransaction(as('producer'), (tx) =>
      enqueue(tx, [event('h1')], { schema: SCHEMA }),
    );
    await waitFor(
      async () => (await findEvent(as('operator'), sent!.eventId, { schema: SCHEMA })).state === 'published',
      {
        what: 'the delivery in the history',
      },
    );
    const parts = await admin.query(
      `SELECT count(*)::int AS n, array_agg(DISTINCT c.relowner::regrole::text) AS owners
       FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = '"${SCHEMA}".deliveries'::regclass`,
    );
    expect(parts.rows[0].n).toBeGreaterThanOrEqual(5); // DEFAULT, today and 3 ahead
    expect(parts.rows[0].owners).toEqual([roles.migrator]);
    // Only through the functions: the relay itself has no DDL right on the table.
    await expect(
      as('relay').query(
        `CREATE TABLE "${SCHEMA}".x PARTITION OF "${SCHEMA}".deliveries FOR VALUES FROM ('2001-01-01') TO ('2001-01-02')`,
      ),
    ).rejects.toThrow(/permission denied|must be owner/);
    await expect(
      as('producer').query(`SELECT "${SCHEMA}".history_add_partition('2001-01-01')`),
    ).rejects.toThrow(/permission denied for function/);
    const maintained = await run(
      process.execPath,
      [CLI, 'history', 'maintain', '--json', '--schema', SCHEMA],
      {
        env: { ...process.env, DATABASE_URL: urlOf('operator') },
      },
    );
    expect(JSON.parse(maintained.stdout)).toMatchObject({ created: [], deferred: [] });
    const shown = await run(process.execPath, [CLI, 'event', sent!.eventId, '--schema', SCHEMA], {
      env: { ...process.env, DATABASE_URL: urlOf('operator') },
    });
    expect(shown.stdout).toContain(`published`);
    expect(shown.stdout).toContain(`by relay ${relay.id} to recording`);
    await relay.stop({ timeout: 5000 });
  });

  it('without DELETE on events the relay logs the permission error and keeps going; granted, it delivers', async () => {
    await as('migrator').query(`REVOKE DELETE ON "${SCHEMA}".events FROM "${roles.relay}"`);
    const errors: string[] = [];
    const noop = (): void => undefined;
    const log = (obj: object, msg?: string) => {
      const err = (obj as { err?: { message?: string } }).err;
      errors.push(`${msg ?? ''}: ${err?.message ?? ''}`);
    };
    const publisher = new RecordingPublisher();
    const relay = createRelay({
      pool: as('relay'),
      publisher,
      schema: SCHEMA,
      pollIntervalMs: 50,
      leaseMs: 3000,
      logger: { debug: noop, info: noop, warn: log, error: log },
    });
    relays.push(relay);
    try {
      await relay.start();
      await inTransaction(as('producer'), (tx) => enqueue(tx, event('n1'), { schema: SCHEMA }));
      await waitFor(() => errors.some((e) => /permission denied for table events/.test(e)), {
        what: 'the permission error logged',
      });
      expect(await hotEvents()).toBe(1);
    } finally {
      await grant();
    }
    await waitFor(async () => (await hotEvents()) === 0, { what: 'delivery once granted' });
    await relay.stop({ timeout: 5000 });
  });

  it('the consumer handles, dedups and quarantines; the operator releases and prunes', async () => {
    const inbox = createInbox({
      pool: as('consumer'),
      consumer: 'inventory',
      schema: SCHEMA,
      ordering: 'strict',
      maxAttempts: 2,
      accepts: [{ type: 'order.placed', schemaVersion: 1 }],
    });
    const first = message('c1', 1);
    const apply = async () => {};
    expect((await inbox.handle(first, apply)).status).toBe('processed');
    expect((await inbox.handle(first, apply)).status).toBe('duplicate');
    expect((await inbox.handle(message('c1', 3), apply)).status).toBe('deferred');
    expect((await inbox.handle(message('c2', 1, 'order.unknown'), apply)).status).toBe('quarantined');
    // Its successor is parked behind it, under the aggregate's position lock.
    expect((await inbox.handle(message('c2', 2), apply)).reason).toMatch(/^waiting behind quarantined event/);
    const failing = message('c3', 1);
    const boom = async () => {
      throw new Error('handler failed');
    };
    expect((await inbox.handle(failing, boom)).status).toBe('deferred');
    expect((await inbox.handle(failing, boom)).status).toBe('quarantined');

    const parked = await listQuarantine(as('operator'), { schema: SCHEMA, consumer: 'inventory' });
    expect(parked.map((m) => m.aggregateId).sort()).toEqual(['c2', 'c2', 'c3']);
    const c3 = parked.find((m) => m.aggregateId === 'c3')!;
    await releaseQuarantined(as('operator'), { schema: SCHEMA, ids: [c3.id], reason: 'handler fixed' });
    const again = await inbox.replayReleased(apply);
    expect(again.map((r) => r.status)).toEqual(['processed']);
    const pruned = await pruneInbox(as('operator'), {
      schema: SCHEMA,
      dedupRetentionMs: 3_600_000,
      replayHorizonMs: 3_600_000,
    });
    expect(pruned).toBe(0);

    await expect(as('consumer').query(`SELECT 1 FROM "${SCHEMA}".events`)).rejects.toThrow(
      /permission denied for table events/,
    );
    await expect(
      releaseQuarantined(as('consumer'), { schema: SCHEMA, ids: [c3.id], reason: 'no right to' }),
    ).rejects.toThrow(/permission denied for table audit/);
  });

  it('the WAL key (migration 12): the producer and the relay read it, the consumer, the operator and PUBLIC do not', async () => {
    for (const kind of ['producer', 'relay'] as const) {
      const { rows } = await as(kind).query(`SELECT length(ipad) AS n FROM "${SCHEMA}".wal_key`);
      expect(rows).toEqual([{ n: 64 }]);
    }
    for (const kind of ['consumer', 'operator'] as const) {
      await expect(as(kind).query(`SELECT ipad FROM "${SCHEMA}".wal_key`)).rejects.toThrow(
        /permission denied for table wal_key/,
      );
    }
    const { rows } = await admin.query(`SELECT has_table_privilege('public', $1, 'SELECT') AS public_reads`, [
      `"${SCHEMA}".wal_key`,
    ]);
    expect(rows[0].public_reads).toBe(false);
  });

  it('tx-outbox roles --section wal prints only the revoke of pg_logical_emit_message, granted back to producer and relay', async () => {
    const { stdout } = await run(process.execPath, [
      CLI,
      'roles',
      '--print-sql',
      '--schema',
      SCHEMA,
      '--section',
      'wal',
    ]);
    expect(stdout).toMatch(/^-- 4\. Revoke \(recommended\)/);
    expect(stdout).toContain("EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);");
    expect(stdout).toContain(`'${roles.producer}', '${roles.relay}'`);
    expect(stdout).not.toMatch(/CREATE ROLE|GRANT SELECT/);
  });

  it('tx-outbox roles: --print-sql is required, and a bad role name is refused naming the flag', async () => {
    await expect(run(process.execPath, [CLI, 'roles'])).rejects.toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/^tx-outbox: roles only prints SQL: pass --print-sql\n$/),
    });
    await expect(
      run(process.execPath, [CLI, 'roles', '--print-sql', '--producer', 'Bad-Name']),
    ).rejects.toMatchObject({ code: 2, stderr: expect.stringMatching(/roles\.producer.*"Bad-Name"/) });
  });
});
