/**
 * Replication slots are cluster-wide: two databases of one server, the same outbox schema name in
 * each, both with CDC. Neither the CLI (`migrate --cdc`, `cdc status`, `status`, `cdc drop-slot`,
 * with or without `--slot` and `--terminate`) nor the library (ensureCdcSlot, takeOverSlot, the
 * CDC relay, `enqueue(…, { via: 'wal' })`) ever reports, streams, ends or drops the other
 * database's slot; each database has a default slot of its own, and the relay and the producer
 * resolve the same one. The second database is created for this file and dropped after it.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CdcRelay, createCdcRelay } from '../../src/cdc/relay.js';
import {
  CDC_SLOT_MISMATCH,
  cdcSlotStatus,
  checkCdc,
  dropCdcSlot,
  ensureCdcSlot,
  resolveCdcNames,
  takeOverSlot,
} from '../../src/cdc/setup.js';
import { enqueue } from '../../src/producer/enqueue.js';
import { walSlotGate } from '../../src/producer/wal-slot.js';
import { migrate } from '../../src/schema/migrate.js';
import { inTransaction, waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';
import { collectOutput, type ProcessRun } from '../helpers/processes.js';
import { holdSlot } from '../helpers/slot-holder.js';

const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
/** One schema name, in both databases. */
const SCHEMA = `cdc_dbs_${randomBytes(4).toString('hex')}`;
/** Upper case and a dash: the default slot name has them made lowercase and `_`. */
const OTHER_DB = `TXO-Dbs_${randomBytes(3).toString('hex')}`;

let a: pg.Pool;
let b: pg.Pool;
let aUrl: string;
let bUrl: string;
let aDatabase: string;
/** Database A's default slot of SCHEMA (created in the first test). */
let aSlot: string;
const relays: CdcRelay[] = [];

beforeAll(async () => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  aUrl = DATABASE_URL;
  a = new pg.Pool({ connectionString: aUrl, max: 4 });
  aDatabase = (await a.query<{ db: string }>('SELECT current_database() AS db')).rows[0]!.db;
  await a.query(`CREATE DATABASE "${OTHER_DB}" TEMPLATE template0`);
  const url = new URL(DATABASE_URL);
  url.pathname = `/${encodeURIComponent(OTHER_DB)}`;
  bUrl = url.href;
  b = new pg.Pool({ connectionString: bUrl, max: 8 });
  b.on('error', () => undefined);
  await migrate(a, { schema: SCHEMA, partitions: 4 });
  await migrate(b, { schema: SCHEMA, partitions: 4 });
});

afterAll(async () => {
  await Promise.all(relays.map((r) => r.stop({ timeout: 5000 }).catch(() => undefined)));
  await b?.end();
  if (!a) return;
  // Cleanup only: a test file may drop what it made in both databases.
  await a.query(
    `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
     WHERE database IN ($1, current_database()) AND slot_name LIKE '%' || $2 || '%' AND active_pid IS NOT NULL`,
    [OTHER_DB, SCHEMA],
  );
  await waitFor(
    async () =>
      (
        await a.query(
          `SELECT 1 FROM pg_replication_slots
           WHERE database IN ($1, current_database()) AND slot_name LIKE '%' || $2 || '%' AND active`,
          [OTHER_DB, SCHEMA],
        )
      ).rowCount === 0,
    { what: 'the slots released' },
  );
  await a.query(
    `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
     WHERE database IN ($1, current_database()) AND slot_name LIKE '%' || $2 || '%'`,
    [OTHER_DB, SCHEMA],
  );
  await a.query(`DROP PUBLICATION IF EXISTS "txo_${SCHEMA}"`);
  await a.query(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
  await a.query(`DROP DATABASE IF EXISTS "${OTHER_DB}" WITH (FORCE)`);
  await a.end();
});

/** The built CLI on `url` (DATABASE_URL), on SCHEMA. */
function run(url: string, args: readonly string[]): Promise<ProcessRun> {
  const child = spawn(process.execPath, [CLI, ...args, '--schema', SCHEMA], {
    env: { ...process.env, DATABASE_URL: url },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return collectOutput(child).done;
}

/** The slot named `slot` as the server has it: its database, or undefined when there is none. */
async function slotDatabase(slot: string): Promise<string | undefined> {
  const { rows } = await a.query<{ database: string }>(
    'SELECT database::text AS database FROM pg_replication_slots WHERE slot_name = $1',
    [slot],
  );
  return rows[0]?.database;
}

const event = { aggregateType: 'order', aggregateId: 'o1', type: 'order.placed', payload: { n: 1 } };

describe('two databases, one schema name: no command touches the other database’s slot', () => {
  it('B never used CDC: cdc status and status see no slot, drop-slot drops nothing of A’s', async () => {
    const created = await run(aUrl, ['migrate', '--cdc']);
    expect(created.code, created.stderr).toBe(0);
    aSlot = (await resolveCdcNames(a, { schema: SCHEMA })).slot;
    expect(created.stdout).toContain(`Created replication slot "${aSlot}"`);
    expect(await slotDatabase(aSlot)).toBe(aDatabase);
    // A's slot has WAL it has not confirmed.
    await a.query(`SELECT pg_logical_emit_message(true, 'txo-test', 'unconfirmed')`);

    const status = await run(bUrl, ['cdc', 'status', '--json']);
    expect(status.code, status.stderr).toBe(0);
    const parsed = JSON.parse(status.stdout) as { slot: string; exists: boolean; lagBytes: unknown };
    expect(parsed).toMatchObject({ exists: false, lagBytes: null });
    expect(parsed.slot).not.toBe(aSlot);
    const overall = await run(bUrl, ['status']);
    expect(overall.code, overall.stderr).toBe(0);
    expect(overall.stdout).not.toMatch(/\nCDC\n/);
    expect(overall.stdout).not.toContain(aSlot);

    const dropped = await run(bUrl, ['cdc', 'drop-slot', '--yes']);
    expect(dropped.code, dropped.stderr).toBe(0);
    expect(dropped.stdout).toMatch(/^No replication slot "/);
    expect(await slotDatabase(aSlot)).toBe(aDatabase);
  });

  it('B naming A’s slot (--slot) is refused, naming A and the fix: status, drop-slot, --terminate', async () => {
    const holder = await holdSlot(a, aSlot, `txo_${SCHEMA}`);
    try {
      for (const args of [
        ['cdc', 'status', '--slot', aSlot],
        ['status', '--slot', aSlot],
        ['cdc', 'drop-slot', '--yes', '--slot', aSlot],
        ['cdc', 'drop-slot', '--yes', '--terminate', '--slot', aSlot],
      ]) {
        const refused = await run(bUrl, args);
        expect(refused.code, `${args.join(' ')}: ${refused.stderr}`).toBe(1);
        expect(refused.stderr).toContain(
          `tx-outbox: replication slot "${aSlot}" belongs to the database "${aDatabase}", not to the one this connection is to`,
        );
        expect(refused.stderr).toMatch(/Name a slot of this database with --slot/);
        expect(refused.stdout).toBe('');
      }
      // A's walsender still streams A's slot: nothing ended it.
      const { rows } = await a.query('SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1', [
        aSlot,
      ]);
      expect(rows).toEqual([{ active_pid: holder.pid }]);

      // The library refuses the same way, and takeOverSlot ends nothing of another database.
      await takeOverSlot(b, aSlot, { timeoutMs: 1000 });
      const named = { schema: SCHEMA, slot: aSlot };
      for (const attempt of [
        () => ensureCdcSlot(b, named),
        () => cdcSlotStatus(b, named),
        () => dropCdcSlot(b, { ...named, terminate: true }),
        async () => checkCdc(b, await resolveCdcNames(b, named)),
      ]) {
        await expect(attempt()).rejects.toMatchObject({ code: CDC_SLOT_MISMATCH });
      }
      walSlotGate.reset();
      await expect(
        inTransaction(b, (tx) => enqueue(tx, event, { schema: SCHEMA, via: 'wal', slot: aSlot })),
      ).rejects.toThrow(
        `replication slot "${aSlot}" of schema "${SCHEMA}" belongs to another database ("${aDatabase}")`,
      );
      const still = await a.query('SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1', [
        aSlot,
      ]);
      expect(still.rows).toEqual([{ active_pid: holder.pid }]);
    } finally {
      await holder.close();
    }
    expect(await slotDatabase(aSlot)).toBe(aDatabase);
  });

  it('both with CDC: the defaults differ; producer, relay and CLI of B resolve B’s; drop-slot drops B’s only', async () => {
    const bDefault = (await resolveCdcNames(b, { schema: SCHEMA })).slot;
    expect(bDefault).not.toBe(aSlot);
    const clean = OTHER_DB.toLowerCase().replace(/-/g, '_');
    expect(bDefault).toMatch(new RegExp(`^txo_${clean}_${SCHEMA}_[0-9a-f]{8}$`));

    // Before B has a slot, WAL mode in B is refused naming B's default (never A's).
    walSlotGate.reset();
    await expect(
      inTransaction(b, (tx) => enqueue(tx, event, { schema: SCHEMA, via: 'wal' })),
    ).rejects.toThrow(`replication slot "${bDefault}" of schema "${SCHEMA}" does not exist`);

    const created = await run(bUrl, ['migrate', '--cdc']);
    expect(created.code, created.stderr).toBe(0);
    expect(created.stdout).toContain(`Created replication slot "${bDefault}"`);
    expect(await slotDatabase(bDefault)).toBe(OTHER_DB);
    expect(await slotDatabase(aSlot)).toBe(aDatabase);

    walSlotGate.reset();
    await inTransaction(b, (tx) => enqueue(tx, event, { schema: SCHEMA, via: 'wal' }));
    await inTransaction(a, (tx) => enqueue(tx, event, { schema: SCHEMA, via: 'wal' }));

    // B's CDC relay streams B's default slot.
    const relay = createCdcRelay({
      pool: b,
      publisher: new RecordingPublisher(),
      schema: SCHEMA,
      relayId: 'dbs-b',
      heartbeatMs: 500,
      silenceTimeoutMs: 5000,
      leaseMs: 3000,
    });
    relays.push(relay);
    await relay.start();
    expect(relay.stats().cdc.slot).toBe(bDefault);
    await waitFor(() => relay.stats().cdc.streaming, { what: 'B streaming' });
    await relay.stop({ timeout: 5000 });

    for (const [url, slot] of [
      [aUrl, aSlot],
      [bUrl, bDefault],
    ] as const) {
      const status = await run(url, ['cdc', 'status', '--json']);
      expect(status.code, status.stderr).toBe(0);
      expect(JSON.parse(status.stdout)).toMatchObject({ slot, exists: true });
    }

    const dropped = await run(bUrl, ['cdc', 'drop-slot', '--yes']);
    expect(dropped.code, dropped.stderr).toBe(0);
    expect(dropped.stdout).toContain(`Dropped replication slot "${bDefault}"`);
    expect(await slotDatabase(bDefault)).toBeUndefined();
    expect(await slotDatabase(aSlot)).toBe(aDatabase);
  });
});
