/**
 * Issue 14, test 7: an idle outbox while another database on the server writes WAL. Nothing in
 * the stream is the relay's, so only its heartbeat (pg_logical_emit_message every heartbeatMs)
 * gives it a position to confirm: the slot's confirmed_flush_lsn must follow the server's WAL
 * (past the position read after the other database's writes), and the slot must not retain
 * what the other database wrote.
 *
 * The outbox gets a database of its own: pgoutput streams every logical message of its database,
 * so on the shared `test` database other CDC relays' heartbeats would move the slot as well.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lsnValue, slotState, walInsertLsn } from '../helpers/cdc.js';
import { waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { CdcFixture, natsNames } from './cdc-scenarios.js';

const HEARTBEAT_MS = 300;
const tag = randomBytes(4).toString('hex');
const outboxDb = `cdc_failures_outbox_${tag}`;
const scratchDb = `cdc_failures_scratch_${tag}`;
let admin: pg.Pool;
let fixture: CdcFixture | undefined;
let scratch: pg.Pool | undefined;

function urlOf(database: string): string {
  const url = new URL(DATABASE_URL);
  url.pathname = `/${database}`;
  return url.toString();
}

beforeAll(async () => {
  admin = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
  await admin.query(`CREATE DATABASE "${outboxDb}"`);
  await admin.query(`CREATE DATABASE "${scratchDb}"`);
  fixture = await CdcFixture.create('cdc_failures_heartbeat', urlOf(outboxDb));
});
afterAll(async () => {
  await scratch?.end();
  await fixture?.close();
  for (const db of [scratchDb, outboxDb]) await admin.query(`DROP DATABASE IF EXISTS "${db}" WITH (FORCE)`);
  await admin.end();
}, 60_000);

function ensure(): CdcFixture {
  if (!fixture) throw new Error('no fixture');
  return fixture;
}

describe('cdc failure: idle outbox, another database writing WAL', () => {
  it("the slot's confirmed LSN advances with the heartbeat", async () => {
    const fixture = ensure();
    const { nats } = natsNames(fixture);
    const relay = fixture.relay({
      broker: 'nats',
      nats,
      relayId: 'heartbeat',
      heartbeatMs: HEARTBEAT_MS,
      silenceTimeoutMs: 5000,
      statusIntervalMs: 250,
    });
    await relay.streaming(40_000);
    const start = await slotState(fixture.db.pool, fixture.slot);

    scratch = new pg.Pool({ connectionString: urlOf(scratchDb), max: 2 });
    await scratch.query('CREATE TABLE busy (id bigserial PRIMARY KEY, filler text NOT NULL)');
    // About 20 MB of WAL over 2 s: enough to need a heartbeat, light on the shared disk.
    let rows = 0;
    for (let i = 0; i < 30; i++) {
      await scratch.query(`INSERT INTO busy (filler) SELECT repeat('x', 200) FROM generate_series(1, 2000)`);
      rows += 2000;
      await new Promise((r) => setTimeout(r, 50));
    }
    const written = await walInsertLsn(scratch);
    const writtenBytes = written - start.confirmed;

    const caughtUpAt = Date.now();
    let last = start;
    await waitFor(
      async () => {
        last = await slotState(fixture.db.pool, fixture.slot);
        return last.confirmed >= written;
      },
      {
        timeoutMs: 10 * HEARTBEAT_MS + 5000,
        intervalMs: 50,
        what: `confirmed_flush_lsn ≥ ${written} (start ${start.confirmed})`,
      },
    );
    const followMs = Date.now() - caughtUpAt;
    const s = relay.stats()!;
    console.info(
      `cdc heartbeat: another database wrote ${rows} rows, ${writtenBytes} bytes of WAL; the slot confirmed past it ${followMs} ms after the writes ended (heartbeatMs ${HEARTBEAT_MS}); stats lagBytes ${s.cdc.lagBytes}`,
    );
    expect(last.confirmed).toBeGreaterThan(start.confirmed);
    expect(writtenBytes, 'the other database wrote WAL (the test is meaningful)').toBeGreaterThan(1_000_000n);
    expect(s.published, 'the outbox stayed idle').toBe(0);
    // stats() follows the slot too (lag in bytes behind the server's WAL).
    await relay.waitForStats((x) => lsnValue(x.cdc.confirmedLsn) >= written, {
      timeoutMs: 5000,
      what: 'stats().cdc.confirmedLsn past the writes',
    });
    expect(relay.exited, relay.problems()).toBeUndefined();
  }, 90_000);
});
