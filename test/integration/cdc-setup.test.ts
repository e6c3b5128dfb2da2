import { createHash, randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Heartbeat } from '../../src/cdc/heartbeat.js';
import {
  CDC_SLOT_ACTIVE,
  CDC_SLOT_LOST,
  CDC_SLOT_MISMATCH,
  CDC_WAL_LEVEL,
  type CdcNames,
  cdcNames,
  cdcProblems,
  cdcSlotStatus,
  checkCdc,
  dropCdcSlot,
  ensureCdcSlot,
  resolveCdcNames,
  type SlotRow,
  takeOverSlot,
} from '../../src/cdc/setup.js';
import { SLOT_STATUS_SQL } from '../../src/cdc/setup-sql.js';
import { OutboxError, OutboxValidationError } from '../../src/errors.js';
import { WAL_SLOT_CHECK_SQL } from '../../src/producer/wal-slot.js';
import { quoteSchema, withSchema } from '../../src/schema/identifiers.js';
import { migrate } from '../../src/schema/migrate.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { logRecorder } from '../helpers/log-recorder.js';
import { dropSlotQuietly, holdSlot } from '../helpers/slot-holder.js';

let db: TestDb;
let names: CdcNames;
const slots: string[] = [];

beforeAll(async () => {
  db = await createTestDb('cdc_control_setup', { partitions: 4 });
  names = await resolveCdcNames(db.pool, { schema: db.schema });
  slots.push(names.slot, `${names.slot}_c`, `${names.slot}_td`, `${names.slot}_x`);
});

afterAll(async () => {
  for (const slot of slots) await dropSlotQuietly(db.pool, slot);
  for (const pub of [names.publication, `${names.publication}_c`, `${names.publication}_x`]) {
    await db.pool.query(`DROP PUBLICATION IF EXISTS "${pub}"`);
  }
  await db.close();
});

async function slotRows(slot: string): Promise<{ plugin: string }[]> {
  const { rows } = await db.pool.query<{ plugin: string }>(
    'SELECT plugin FROM pg_replication_slots WHERE slot_name = $1',
    [slot],
  );
  return rows;
}

async function realSlotRow(n: CdcNames): Promise<SlotRow> {
  const { rows } = await db.pool.query<SlotRow>(withSchema(SLOT_STATUS_SQL, quoteSchema(n.schema)), [n.slot]);
  return rows[0]!;
}

describe('cdcNames', () => {
  it('leaves the default slot to the database, defaults the publication to txo_<schema>, validates overrides', () => {
    expect(cdcNames({ schema: 'orders' })).toEqual({
      schema: 'orders',
      slot: undefined,
      publication: 'txo_orders',
    });
    expect(cdcNames('orders', { slot: 's1' }).slot).toBe('s1');
    expect(() => cdcNames({ schema: 'orders', slot: 'Bad-Slot' })).toThrow(OutboxValidationError);
    expect(() => cdcNames({ schema: 'orders', publication: 'x"; DROP' })).toThrow(/publication/);
  });
});

describe('the default slot', () => {
  const sha8 = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 8);

  it('is txo_<database>_<schema>_<hash> of this database, at most 63 characters, distinct when cut', async () => {
    const { rows } = await db.pool.query<{ db: string }>('SELECT current_database() AS db');
    const database = rows[0]!.db;
    const clean = database.replace(/[A-Z]/g, (c) => c.toLowerCase()).replace(/[^a-z0-9_]/g, '_');
    expect(names.slot).toBe(
      `${`txo_${clean}_${db.schema}`.slice(0, 54)}_${sha8(`${database}/${db.schema}`)}`,
    );
    // Schemas of 58 characters sharing their first 54 keep distinct names within 63.
    const long = ['a', 'b'].map((c) => `s${'x'.repeat(56)}${c}`);
    const slots = await Promise.all(
      long.map(async (schema) => (await resolveCdcNames(db.pool, { schema })).slot),
    );
    for (const slot of slots) expect(slot.length).toBeLessThanOrEqual(63);
    expect(slots[0]).not.toBe(slots[1]);
    // A slot given is taken as given.
    expect((await resolveCdcNames(db.pool, { schema: db.schema, slot: 'given_one' })).slot).toBe('given_one');
  });

  it("is a slot txo_<schema> of this database while it exists (before 0.1.0's default), for relay and producer alike", async () => {
    const schema = `lg_${randomBytes(4).toString('hex')}`;
    await migrate(db.pool, { schema, partitions: 1 });
    const fresh = (await resolveCdcNames(db.pool, { schema })).slot;
    expect(fresh).toMatch(new RegExp(`^txo_.*_${schema}_[0-9a-f]{8}$`));
    slots.push(`txo_${schema}`);
    await db.pool.query(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, [`txo_${schema}`]);
    expect((await resolveCdcNames(db.pool, { schema })).slot).toBe(`txo_${schema}`);
    // The producer's check resolves the same slot (the default: null).
    const check = await db.pool.query<{ slot: string; exists: boolean; here: boolean }>(WAL_SLOT_CHECK_SQL, [
      null,
      schema,
    ]);
    expect(check.rows[0]).toMatchObject({ slot: `txo_${schema}`, exists: true, here: true });
    expect(await cdcSlotStatus(db.pool, { schema })).toMatchObject({ slot: `txo_${schema}`, exists: true });
    expect(await dropCdcSlot(db.pool, { schema })).toMatchObject({ slot: true, slotName: `txo_${schema}` });
    expect((await resolveCdcNames(db.pool, { schema })).slot).toBe(fresh);
    await db.pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  });
});

describe('ensureCdcSlot', () => {
  it('creates the publication and the pgoutput slot once; a second call keeps them', async () => {
    const first = await ensureCdcSlot(db.pool, { schema: db.schema });
    expect(first).toEqual({ slot: names.slot, publication: names.publication, created: true });
    const second = await ensureCdcSlot(db.pool, { schema: db.schema });
    expect(second.created).toBe(false);
    expect(await slotRows(names.slot)).toEqual([{ plugin: 'pgoutput' }]);
    const pub = await db.pool.query(
      `SELECT p.pubinsert, p.pubupdate, p.pubdelete FROM pg_publication p
       JOIN pg_publication_tables t ON t.pubname = p.pubname
       WHERE p.pubname = $1 AND t.schemaname = $2 AND t.tablename = 'events'`,
      [names.publication, db.schema],
    );
    expect(pub.rows).toEqual([{ pubinsert: true, pubupdate: false, pubdelete: false }]);
  });

  it('concurrent calls create exactly one slot and one publication', async () => {
    const opts = { schema: db.schema, slot: `${names.slot}_c`, publication: `${names.publication}_c` };
    const pools = Array.from({ length: 5 }, () => new pg.Pool({ connectionString: DATABASE_URL, max: 1 }));
    try {
      const results = await Promise.all(pools.map((p) => ensureCdcSlot(p, opts)));
      expect(results.filter((r) => r.created)).toHaveLength(1);
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
    expect(await slotRows(opts.slot)).toHaveLength(1);
    const pubs = await db.pool.query('SELECT 1 FROM pg_publication WHERE pubname = $1', [opts.publication]);
    expect(pubs.rowCount).toBe(1);
  });

  it('refuses a slot of another plugin and a publication without the events table', async () => {
    const td = { schema: db.schema, slot: `${names.slot}_td` };
    await db.pool.query(`SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, [td.slot]);
    const err = await ensureCdcSlot(db.pool, td).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OutboxError);
    expect((err as OutboxError).code).toBe(CDC_SLOT_MISMATCH);
    expect((err as Error).message).toMatch(/plugin "test_decoding"/);
    const check = await checkCdc(db.pool, await resolveCdcNames(db.pool, td)).catch((e: unknown) => e);
    expect((check as OutboxError).code).toBe(CDC_SLOT_MISMATCH);
    await db.pool.query('SELECT pg_drop_replication_slot($1)', [td.slot]);

    const other = `${names.publication}_x`;
    await db.pool.query(`CREATE PUBLICATION "${other}" FOR TABLE "${db.schema}".config`);
    const pubErr = await ensureCdcSlot(db.pool, {
      schema: db.schema,
      slot: `${names.slot}_x`,
      publication: other,
    }).catch((e: unknown) => e);
    expect((pubErr as OutboxError).code).toBe(CDC_SLOT_MISMATCH);
    expect((pubErr as Error).message).toMatch(/does not publish inserts into/);
    expect(await slotRows(`${names.slot}_x`)).toHaveLength(0); // nothing created after the refusal
  });
});

describe('checkCdc', () => {
  it('passes on this server and warns about unbounded retention exactly when max_slot_wal_keep_size = -1', async () => {
    const { rows } = await db.pool.query<{ v: string }>(
      `SELECT current_setting('max_slot_wal_keep_size') AS v`,
    );
    const { lines, logger } = logRecorder();
    const check = await checkCdc(db.pool, names, logger);
    const unbounded = rows[0]!.v === '-1';
    expect(check.warnings.length).toBe(unbounded ? 1 : 0);
    expect(lines.filter((l) => l.level === 'warn')).toHaveLength(unbounded ? 1 : 0);
    if (unbounded) expect(check.warnings[0]).toMatch(/max_slot_wal_keep_size is -1.*Bound it/);
  });

  it('wal_level other than logical is TXO_CDC_WAL_LEVEL saying how to fix it (a fake settings row)', () => {
    const run = () => cdcProblems(names, { wal_level: 'replica', max_slot_wal_keep_size: '10GB' }, undefined);
    expect(run).toThrow(OutboxError);
    try {
      run();
    } catch (error) {
      expect((error as OutboxError).code).toBe(CDC_WAL_LEVEL);
      expect((error as Error).message).toMatch(/wal_level is "replica".*wal_level = 'logical'.*restart/);
    }
    expect(
      cdcProblems(names, { wal_level: 'logical', max_slot_wal_keep_size: '10GB' }, undefined).warnings,
    ).toEqual([]);
  });

  it('a lost slot (real row, wal_status forced) is TXO_CDC_SLOT_LOST with its LSN and the recovery', async () => {
    const row = await realSlotRow(names);
    expect(row.exists).toBe(true);
    const lost = { ...row, wal_status: 'lost' };
    let error: unknown;
    try {
      cdcProblems(names, { wal_level: 'logical', max_slot_wal_keep_size: '10GB' }, lost);
    } catch (e) {
      error = e;
    }
    expect((error as OutboxError).code).toBe(CDC_SLOT_LOST);
    const message = (error as Error).message;
    expect(message).toContain(`confirmed up to LSN ${row.confirmed_lsn}`);
    expect(message).toMatch(/may be missing from the broker/);
    expect(message).toMatch(/tx-outbox relay without --source cdc/);
    expect(message).toMatch(/tx-outbox cdc drop-slot --yes.*tx-outbox migrate --cdc/);
    // Not lost: no error.
    expect(() =>
      cdcProblems(names, { wal_level: 'logical', max_slot_wal_keep_size: '10GB' }, row),
    ).not.toThrow();
  });
});

describe('cdcSlotStatus', () => {
  it('reports the slot, its lags, and the relay-written lag seconds', async () => {
    await db.pool.query(`SELECT pg_logical_emit_message(false, 'tx-outbox:test', 'x')`);
    const status = await cdcSlotStatus(db.pool, { schema: db.schema });
    expect(status).toMatchObject({
      slot: names.slot,
      publication: names.publication,
      exists: true,
      active: false,
      activePid: null,
      lagSeconds: null,
      measuredAt: null,
    });
    expect(['reserved', 'extended']).toContain(status.walStatus);
    expect(status.confirmedLsn).toMatch(/^[0-9A-F]+\/[0-9A-F]+$/);
    expect(status.lagBytes).toBeGreaterThan(0);
    expect(status.retainedBytes).toBeGreaterThanOrEqual(status.lagBytes!);

    await db.pool.query(
      `INSERT INTO "${db.schema}".cdc_state (slot_name, relay_id, confirmed_lsn, lag_seconds, measured_at)
       VALUES ($1, 'r1', '0/1', 1.5, now())`,
      [names.slot],
    );
    const measured = await cdcSlotStatus(db.pool, { schema: db.schema });
    expect(measured.lagSeconds).toBe(1.5);
    expect(measured.measuredAt).toBeInstanceOf(Date);

    const none = await cdcSlotStatus(db.pool, { schema: db.schema, slot: 'txo_no_such_slot_here' });
    expect(none).toMatchObject({
      exists: false,
      active: false,
      confirmedLsn: null,
      lagBytes: null,
      retainedBytes: null,
    });
  });

  it('shows an active slot with the walsender pid', async () => {
    const holder = await holdSlot(db.pool, names.slot, names.publication);
    try {
      const status = await cdcSlotStatus(db.pool, { schema: db.schema });
      expect(status.active).toBe(true);
      expect(status.activePid).toBe(holder.pid);
    } finally {
      await holder.close();
    }
  });
});

describe('takeOverSlot and dropCdcSlot', () => {
  it('drop refuses an active slot, takeOverSlot ends the holder, drop then removes slot and publication', async () => {
    const holder = await holdSlot(db.pool, names.slot, names.publication);
    const refused = await dropCdcSlot(db.pool, { schema: db.schema }).catch((e: unknown) => e);
    expect((refused as OutboxError).code).toBe(CDC_SLOT_ACTIVE);
    expect((refused as Error).message).toContain(String(holder.pid));
    expect(await slotRows(names.slot)).toHaveLength(1);

    await takeOverSlot(db.pool, names.slot, { timeoutMs: 10_000 });
    expect(await holder.ended).toBeInstanceOf(Error); // the walsender was terminated
    const after = await cdcSlotStatus(db.pool, { schema: db.schema });
    expect(after.active).toBe(false);
    await takeOverSlot(db.pool, names.slot); // idle slot: nothing to do

    const dropped = await dropCdcSlot(db.pool, { schema: db.schema });
    expect(dropped).toEqual({ slot: true, publication: true, slotName: names.slot });
    expect(await slotRows(names.slot)).toHaveLength(0);
    expect(await dropCdcSlot(db.pool, { schema: db.schema })).toEqual({
      slot: false,
      publication: false,
      slotName: names.slot,
    });
    await holder.close();
  });

  it('drop with terminate ends an active holder itself', async () => {
    const opts = { schema: db.schema, slot: `${names.slot}_c`, publication: `${names.publication}_c` };
    const holder = await holdSlot(db.pool, opts.slot, opts.publication);
    expect(await dropCdcSlot(db.pool, { ...opts, terminate: true })).toEqual({
      slot: true,
      publication: true,
      slotName: opts.slot,
    });
    expect(await holder.ended).toBeInstanceOf(Error);
    await holder.close();
  });
});

describe('Heartbeat', () => {
  it('emits non-transactional messages the slot streams, every interval', async () => {
    const n = await resolveCdcNames(db.pool, {
      schema: db.schema,
      slot: `${names.slot}_x`,
      publication: `${names.publication}_x`,
    });
    await db.pool.query(`DROP PUBLICATION IF EXISTS "${n.publication}"`);
    await ensureCdcSlot(db.pool, n);
    const prefix = `tx-outbox:${db.schema}:heartbeat`;
    const beat = new Heartbeat({ pool: db.pool, prefix, intervalMs: 50 });
    beat.start();
    beat.start(); // idempotent
    await new Promise((r) => setTimeout(r, 400));
    await beat.stop();
    const beats = beat.beats;
    expect(beats).toBeGreaterThanOrEqual(3);
    expect(beats).toBeLessThanOrEqual(10);
    await new Promise((r) => setTimeout(r, 150));
    expect(beat.beats).toBe(beats); // stopped: no more
    const { rows } = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
         'proto_version', '1', 'publication_names', $2, 'messages', 'true')
       WHERE position(convert_to($3, 'UTF8') IN data) > 0`,
      [n.slot, n.publication, prefix],
    );
    expect(rows[0]!.n).toBe(beats);
  });

  it('logs failures rate-limited and never throws', async () => {
    const dead = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
    await dead.end();
    const { lines, logger } = logRecorder();
    const beat = new Heartbeat({ pool: dead, prefix: 'tx-outbox:x:heartbeat', intervalMs: 10, logger });
    beat.start();
    await new Promise((r) => setTimeout(r, 200));
    await beat.stop();
    expect(beat.failures).toBeGreaterThanOrEqual(3);
    expect(lines.filter((l) => l.level === 'warn')).toHaveLength(1);
  });
});
