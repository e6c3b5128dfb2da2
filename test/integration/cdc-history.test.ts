/**
 * The delivery history of the CDC relay in WAL mode: an event streamed and delivered gets its
 * `deliveries` row (identity, partition, timing, relay, publisher; the payload with
 * `history.payloads`), so `findEvent` and `tx-outbox event <id>` answer "published"; an event that
 * failed in the stream and was delivered by the hand-over source gets one row too; with history
 * off nothing is written.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { FencedError } from '../../src/cdc/handover-rows.js';
import { type CdcRelay, createCdcRelay } from '../../src/cdc/relay.js';
import { dropCdcSlot, ensureCdcSlot } from '../../src/cdc/setup.js';
import type { StreamEvent } from '../../src/cdc/stream-batch.js';
import { WalHistory } from '../../src/cdc/stream-history.js';
import { findEvent } from '../../src/ops/find-event.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import { partitionOf } from '../../src/producer/partition-of.js';
import { inTransaction } from '../../src/producer/transaction.js';
import { migrate } from '../../src/schema/migrate.js';
import { waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
const execFileP = promisify(execFile);
const PARTITIONS = 4;

const schema = `cdc_hist_${randomBytes(3).toString('hex')}`;
let pool: pg.Pool;
let admin: pg.Pool;
const relays: CdcRelay[] = [];

beforeAll(async () => {
  admin = new pg.Pool({ connectionString: DATABASE_URL, max: 5 });
  pool = new pg.Pool({ connectionString: DATABASE_URL, max: 10 });
  pool.on('error', () => undefined);
  await migrate(admin, { schema, partitions: PARTITIONS });
  await ensureCdcSlot(admin, { schema });
});
afterEach(async () => {
  await Promise.all(relays.splice(0).map((r) => r.stop({ timeout: 5000 })));
  await admin.query(`DELETE FROM "${schema}".deliveries`);
});
afterAll(async () => {
  await dropCdcSlot(admin, { schema }).catch(() => undefined);
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool.end();
  await admin.end();
});

async function streaming(publisher: RecordingPublisher, relayId: string, extra: object): Promise<CdcRelay> {
  const r = createCdcRelay({
    pool,
    publisher,
    schema,
    relayId,
    pollIntervalMs: 50,
    leaseMs: 3000,
    heartbeatMs: 300,
    statusIntervalMs: 100,
    backoff: { baseMs: 50, capMs: 200 },
    ...extra,
  } as Parameters<typeof createCdcRelay>[0]);
  relays.push(r);
  await r.start();
  await waitFor(() => r.stats().cdc.streaming, { what: 'streaming', timeoutMs: 15_000 });
  return r;
}

async function put(events: OutboxEvent[]): Promise<{ ids: string[]; from: Date; to: Date }> {
  const from = await dbNow();
  const results = await inTransaction(admin, (tx) => enqueue(tx, events, { schema, via: 'wal' }));
  return { ids: results.map((r) => r.eventId), from, to: await dbNow() };
}

async function dbNow(): Promise<Date> {
  const { rows } = await admin.query<{ now: Date }>('SELECT clock_timestamp() AS now');
  return rows[0]!.now;
}

interface DeliveryRow {
  event_id: string;
  partition: number;
  aggregate_type: string;
  aggregate_id: string;
  sequence: string;
  event_type: string;
  topic: string | null;
  created_at: Date;
  published_at: Date;
  attempts: number;
  relay_id: string;
  publisher: string;
  payload: unknown;
  payload_bytes: Buffer | null;
}

async function deliveries(ids: readonly string[]): Promise<DeliveryRow[]> {
  const { rows } = await admin.query<DeliveryRow>(
    `SELECT * FROM "${schema}".deliveries WHERE event_id = ANY ($1::uuid[]) ORDER BY aggregate_id, sequence`,
    [ids],
  );
  return rows;
}

async function rowsFor(ids: readonly string[]): Promise<DeliveryRow[]> {
  let found: DeliveryRow[] = [];
  await waitFor(
    async () => {
      found = await deliveries(ids);
      return found.length >= ids.length;
    },
    { what: `${ids.length} history rows`, timeoutMs: 15_000 },
  );
  return found;
}

const bytes = Buffer.from([0, 1, 2, 250, 255]);

function events(agg: string): OutboxEvent[] {
  return [
    { aggregateType: 'order', aggregateId: agg, type: 'placed', payload: { n: 1, agg } },
    { aggregateType: 'order', aggregateId: agg, type: 'raw', topic: 'raw-topic', payload: bytes },
  ] as OutboxEvent[];
}

describe('the delivery history of WAL-mode events (CDC relay)', () => {
  for (const payloads of [false, true]) {
    it(`a streamed WAL-mode event gets its deliveries row (payloads ${payloads ? 'on' : 'off'})`, async () => {
      const agg = `h-${payloads}`;
      const relayId = `cdc-hist-${payloads}`;
      const publisher = new RecordingPublisher();
      await streaming(publisher, relayId, { history: { payloads } });
      const before = await dbNow();
      const { ids, from, to } = await put(events(agg));
      await waitFor(() => publisher.received.length === 2, { what: 'delivered', timeoutMs: 15_000 });
      const rows = await rowsFor(ids);
      const after = await dbNow();
      expect(rows).toHaveLength(2);
      const partition = partitionOf('order', agg, PARTITIONS);
      for (const [i, row] of rows.entries()) {
        expect(row).toMatchObject({
          event_id: ids[i],
          partition,
          aggregate_type: 'order',
          aggregate_id: agg,
          sequence: String(i + 1),
          event_type: i === 0 ? 'placed' : 'raw',
          topic: i === 0 ? null : 'raw-topic',
          attempts: 1,
          relay_id: relayId,
          publisher: 'recording',
        });
        // created_at is the producer's transaction time (milliseconds), published_at the database's.
        expect(row.created_at.getTime()).toBeGreaterThanOrEqual(Math.floor(from.getTime()) - 1);
        expect(row.created_at.getTime()).toBeLessThanOrEqual(to.getTime());
        expect(row.published_at.getTime()).toBeGreaterThanOrEqual(before.getTime());
        expect(row.published_at.getTime()).toBeLessThanOrEqual(after.getTime());
        expect(row.published_at.getTime()).toBeGreaterThanOrEqual(row.created_at.getTime());
      }
      if (payloads) {
        expect(rows[0]!.payload).toEqual({ n: 1, agg });
        expect(rows[0]!.payload_bytes).toBeNull();
        expect(rows[1]!.payload).toBeNull();
        expect(rows[1]!.payload_bytes).toEqual(bytes);
      } else {
        for (const row of rows) expect([row.payload, row.payload_bytes]).toEqual([null, null]);
      }
      const found = await findEvent(admin, ids[0]!, { schema });
      expect(found).toMatchObject({
        state: 'published',
        relayId,
        publisher: 'recording',
        attempts: 1,
        event: {
          eventId: ids[0],
          aggregateType: 'order',
          aggregateId: agg,
          sequence: 1,
          type: 'placed',
          partition,
        },
      });
      if (found.state === 'published') expect(found.deliveries).toHaveLength(1);
    });
  }

  it('tx-outbox event <id> says published for a streamed WAL-mode event', async () => {
    if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
    const publisher = new RecordingPublisher();
    await streaming(publisher, 'cdc-hist-cli', { history: true });
    const { ids } = await put(events('cli'));
    await rowsFor(ids);
    const env = { ...process.env, DATABASE_URL };
    const shown = await execFileP(process.execPath, [CLI, 'event', ids[0]!, '--schema', schema], { env });
    expect(shown.stdout).toContain(`Event ${ids[0]}: published`);
    expect(shown.stdout).toContain('order/cli #1');
    expect(shown.stdout).toContain('by relay cdc-hist-cli to recording, after 1 attempt');
  });

  it('a WAL-mode event that failed in the stream and was delivered by the hand-over source gets one row', async () => {
    const agg = 'h-failed';
    const publisher = new RecordingPublisher();
    let refused = 0;
    publisher.verdict = (m) => {
      if (m.aggregateId === agg && m.sequence === 1 && refused++ === 0)
        return { ok: false, retryable: true, error: new Error('not this time') };
      return { ok: true };
    };
    const relay = await streaming(publisher, 'cdc-hist-handover', { history: true });
    const { ids } = await put(events(agg));
    await waitFor(() => publisher.received.filter((m) => m.aggregateId === agg).length === 2, {
      what: 'delivered',
      timeoutMs: 15_000,
    });
    expect(refused).toBeGreaterThan(0);
    const rows = await rowsFor(ids);
    expect(rows.map((r) => [r.event_id, r.sequence, r.relay_id])).toEqual([
      [ids[0], '1', 'cdc-hist-handover'],
      [ids[1], '2', 'cdc-hist-handover'],
    ]);
    // The failed one was attempted twice: once by the stream, once by the hand-over source.
    expect(rows[0]!.attempts).toBe(2);
    expect(rows[0]!.partition).toBe(partitionOf('order', agg, PARTITIONS));
    await relay.stop({ timeout: 5000 });
    expect(await deliveries(ids)).toHaveLength(2);
  });

  it('with history off, a streamed WAL-mode event writes no deliveries row', async () => {
    const publisher = new RecordingPublisher();
    const relay = await streaming(publisher, 'cdc-hist-off', {});
    const { ids } = await put(events('h-off'));
    await waitFor(() => publisher.received.length === 2, { what: 'delivered', timeoutMs: 15_000 });
    // Stopping waits for the batch's settle: whatever it would write is written by then.
    await relay.stop({ timeout: 5000 });
    expect(await deliveries(ids)).toEqual([]);
    expect((await findEvent(admin, ids[0]!, { schema })).state).toBe('unknown');
  });

  it('a relay whose partitions were taken over writes no history row (fenced)', async () => {
    const history = new WalHistory(schema, `"${schema}"`, true, 'recording');
    const eventId = '01900000-0000-7000-8000-00000000f00d';
    const wal = {
      eventId,
      aggregateType: 'order',
      aggregateId: 'fenced',
      sequence: 1,
      sequenceBase: 0,
      callerVersion: false,
      partition: partitionOf('order', 'fenced', PARTITIONS)!,
      type: 't',
      schemaVersion: 1,
      topic: null,
      payload: Buffer.from('{}'),
      contentType: 'application/json',
      headers: {},
      createdAt: new Date(),
    } as const;
    const event = { via: 'wal', wal } as unknown as StreamEvent;
    const { rows } = await admin.query<{ partition: number; epoch: string }>(
      `SELECT partition, epoch::text FROM "${schema}".partitions ORDER BY partition`,
    );
    const fence = {
      relayId: 'cdc-hist-stale',
      partitions: rows.map((r) => r.partition),
      epochs: rows.map((r) => r.epoch),
    };
    await expect(history.record(admin, fence, [event])).rejects.toBeInstanceOf(FencedError);
    expect(await deliveries([eventId])).toEqual([]);
  });
});
