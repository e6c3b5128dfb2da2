import { randomUUID } from 'node:crypto';
import net from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { envelopeHeaders } from '../../src/envelope/bindings.js';
import { createInbox, type InboxOptions } from '../../src/inbox/inbox.js';
import { fromEnvelope, type InboxMessage } from '../../src/inbox/message.js';
import {
  listQuarantine,
  pruneInbox,
  releaseQuarantined,
  showQuarantined,
} from '../../src/inbox/quarantine.js';
import { createTestDb, type TestDb, waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { makeMessage } from '../helpers/messages.js';

let db: TestDb;
beforeAll(async () => {
  db = await createTestDb('inbox');
  await db.pool.query(`CREATE TABLE "${db.schema}".effects (event_id uuid, aggregate_id text, sequence int)`);
});
afterAll(async () => {
  await db?.close();
});

function message(aggregateId: string, sequence: number, extra: Partial<InboxMessage> = {}): InboxMessage {
  return {
    eventId: randomUUID(),
    type: 'stock.reserved',
    aggregateType: 'order',
    aggregateId,
    sequence,
    schemaVersion: 1,
    payload: Buffer.from(JSON.stringify({ qty: sequence })),
    headers: {},
    ...extra,
  };
}

function inbox(extra: Partial<InboxOptions> & { consumer?: string } = {}) {
  return createInbox({
    pool: db.pool,
    consumer: `c-${randomUUID().slice(0, 8)}`,
    schema: db.schema,
    ...extra,
  });
}

const record = (tx: { query: (q: string, v: unknown[]) => Promise<unknown> }, m: InboxMessage) =>
  tx.query(`INSERT INTO "${db.schema}".effects VALUES ($1, $2, $3)`, [m.eventId, m.aggregateId, m.sequence]);

async function effects(eventId: string): Promise<number> {
  const { rows } = await db.pool.query(
    `SELECT count(*)::int AS n FROM "${db.schema}".effects WHERE event_id = $1`,
    [eventId],
  );
  return rows[0].n;
}

describe('inbox', () => {
  it('the same event delivered concurrently to two instances has exactly one effect', async () => {
    const consumer = `dup-${randomUUID().slice(0, 8)}`;
    const a = createInbox({ pool: db.pool, consumer, schema: db.schema });
    const b = createInbox({ pool: db.pool, consumer, schema: db.schema });
    const m = message('d1', 1);
    const slow = async (tx: Parameters<typeof record>[0]) => {
      await record(tx, m);
      await new Promise((r) => setTimeout(r, 100));
    };
    const results = await Promise.all([a.handle(m, slow), b.handle(m, slow)]);
    expect(results.map((r) => r.status).sort()).toEqual(['duplicate', 'processed']);
    expect(await effects(m.eventId)).toBe(1);
    expect((await a.handle(m, slow)).status).toBe('duplicate');
    // Counted per inbox instance: what each answered.
    const counts = [a.stats(), b.stats()];
    expect(counts.reduce((n, c) => n + c.processed, 0)).toBe(1);
    expect(counts.reduce((n, c) => n + c.duplicate, 0)).toBe(2);
  });

  it('strict: a gap defers, the missing event fills it, then the deferred one applies', async () => {
    const ib = inbox({ ordering: 'strict' });
    const [m1, m2, m3] = [message('s', 1), message('s', 2), message('s', 3)];
    expect((await ib.handle(m1, (tx) => record(tx, m1))).status).toBe('processed');
    const deferred = await ib.handle(m3, (tx) => record(tx, m3));
    expect(deferred).toMatchObject({ status: 'deferred', attempts: 1 });
    expect(deferred.reason).toMatch(/waiting for sequence 2/);
    expect(await effects(m3.eventId)).toBe(0);
    expect((await ib.handle(m2, (tx) => record(tx, m2))).status).toBe('processed');
    expect((await ib.handle(m3, (tx) => record(tx, m3))).status).toBe('processed');
    expect((await ib.handle(m2, (tx) => record(tx, m2))).status).toBe('duplicate');
  });

  it('strict: an unseen aggregate starts at sequence 1; with startSequence first-seen, at the first delivered', async () => {
    const ib = inbox({ ordering: 'strict' });
    const [m1, m2] = [message('u', 1), message('u', 2)];
    // Sequence 2 first (another instance still holds 1): it waits, it is not the start.
    const early = await ib.handle(m2, (tx) => record(tx, m2));
    expect(early).toMatchObject({ status: 'deferred' });
    expect(early.reason).toMatch(/waiting for sequence 1/);
    expect((await ib.handle(m1, (tx) => record(tx, m1))).status).toBe('processed');
    expect((await ib.handle(m2, (tx) => record(tx, m2))).status).toBe('processed');

    const late = inbox({ ordering: 'strict', startSequence: 'first-seen' });
    const [m7, m8] = [message('v', 7), message('v', 8)];
    expect((await late.handle(m7, (tx) => record(tx, m7))).status).toBe('processed');
    expect((await late.handle(m8, (tx) => record(tx, m8))).status).toBe('processed');
    expect(() => inbox({ startSequence: 0 })).toThrow(/startSequence/);
  });

  it('strict: a gap that is never filled is quarantined after the limit, with the reason', async () => {
    const ib = inbox({ ordering: 'strict', maxDeferrals: 3 });
    const m1 = message('g', 1);
    const m5 = message('g', 5);
    await ib.handle(m1, (tx) => record(tx, m1));
    expect((await ib.handle(m5, (tx) => record(tx, m5))).status).toBe('deferred');
    expect((await ib.handle(m5, (tx) => record(tx, m5))).status).toBe('deferred');
    const parked = await ib.handle(m5, (tx) => record(tx, m5));
    expect(parked.status).toBe('quarantined');
    expect(parked.reason).toMatch(/gap not filled after 3 deliveries/);
    const { rows } = await db.pool.query(
      `SELECT reason, sequence::int FROM "${db.schema}".inbox_quarantine WHERE event_id = $1`,
      [m5.eventId],
    );
    expect(rows[0].sequence).toBe(5);
  });

  it('strict: the gap budget restarts when the aggregate advances (the gap shrank: the stream is alive)', async () => {
    // Sequence 5 waits for 2, 3, 4; each arrival of one of them restarts its count and its clock.
    const ib = inbox({ ordering: 'strict', maxDeferrals: 3 });
    const [m1, m2, m3, m4, m5] = [1, 2, 3, 4, 5].map((n) => message('adv', n)) as InboxMessage[];
    await ib.handle(m1!, (tx) => record(tx, m1!));
    for (const filler of [m2!, m3!, m4!]) {
      expect(await ib.handle(m5!, (tx) => record(tx, m5!))).toMatchObject({
        status: 'deferred',
        attempts: 1,
      });
      expect(await ib.handle(m5!, (tx) => record(tx, m5!))).toMatchObject({
        status: 'deferred',
        attempts: 2,
      });
      expect((await ib.handle(filler, (tx) => record(tx, filler))).status).toBe('processed');
    }
    expect((await ib.handle(m5!, (tx) => record(tx, m5!))).status).toBe('processed');
    expect(ib.stats()).toMatchObject({ processed: 5, deferred: 6, quarantined: 0 });

    // The time budget likewise: 300 ms without the aggregate advancing, counted from the last advance.
    const timed = inbox({ ordering: 'strict', maxGapMs: 300 });
    const [t1, t2, , t4] = [1, 2, 3, 4].map((n) => message('adv-t', n)) as InboxMessage[];
    await timed.handle(t1!, (tx) => record(tx, t1!));
    expect((await timed.handle(t4!, (tx) => record(tx, t4!))).status).toBe('deferred');
    await new Promise((r) => setTimeout(r, 200));
    await timed.handle(t2!, (tx) => record(tx, t2!));
    await new Promise((r) => setTimeout(r, 200));
    // 400 ms since its first deferral, but the aggregate advanced meanwhile: the clock restarts.
    expect((await timed.handle(t4!, (tx) => record(tx, t4!))).status).toBe('deferred');
    await new Promise((r) => setTimeout(r, 350));
    const parked = await timed.handle(t4!, (tx) => record(tx, t4!));
    expect(parked.status).toBe('quarantined');
    expect(parked.reason).toMatch(
      /^gap not filled for 0\.\d s \(2 deliveries\) without the aggregate advancing: waiting for sequence 3 of this aggregate$/,
    );
  });

  it('strict: an outage between two deferrals counts toward maxGapMs for at most a minute (only observed waiting does)', async () => {
    const ib = inbox({ ordering: 'strict' }); // maxGapMs: the default 5 min
    const [o1, o2, o3] = [1, 2, 3].map((n) => message('outage', n)) as InboxMessage[];
    await ib.handle(o1!, (tx) => record(tx, o1!));
    expect(await ib.handle(o3!, (tx) => record(tx, o3!))).toMatchObject({ status: 'deferred', attempts: 1 });
    // The consumer, broker or database is down for 10 minutes: the row's clock is moved back by as much.
    const outage = async () =>
      db.pool.query(
        `UPDATE "${db.schema}".inbox_attempts
         SET first_at = first_at - interval '10 minutes', last_at = last_at - interval '10 minutes'
         WHERE event_id = $1`,
        [o3!.eventId],
      );
    await outage();
    // After recovery, 3 is redelivered before 2: still a healthy stream, it waits.
    expect(await ib.handle(o3!, (tx) => record(tx, o3!))).toMatchObject({ status: 'deferred', attempts: 2 });
    const { rows } = await db.pool.query(
      `SELECT waited_ms::int AS waited FROM "${db.schema}".inbox_attempts WHERE event_id = $1`,
      [o3!.eventId],
    );
    expect(rows[0].waited).toBe(60_000);
    expect((await ib.handle(o2!, (tx) => record(tx, o2!))).status).toBe('processed');
    expect((await ib.handle(o3!, (tx) => record(tx, o3!))).status).toBe('processed');

    // Each long interval is a minute of waiting: a hole redelivered rarely still ends in quarantine.
    const slow = inbox({ ordering: 'strict', maxGapMs: 90_000 });
    const [s1, , s3] = [1, 2, 3].map((n) => message('outage-slow', n)) as InboxMessage[];
    await slow.handle(s1!, (tx) => record(tx, s1!));
    for (const attempts of [1, 2]) {
      expect(await slow.handle(s3!, (tx) => record(tx, s3!))).toMatchObject({ status: 'deferred', attempts });
      await db.pool.query(
        `UPDATE "${db.schema}".inbox_attempts SET last_at = last_at - interval '10 minutes' WHERE event_id = $1`,
        [s3!.eventId],
      );
    }
    const parked = await slow.handle(s3!, (tx) => record(tx, s3!));
    expect(parked.status).toBe('quarantined');
    expect(parked.reason).toMatch(
      /^gap not filled for 120 s \(3 deliveries\) without the aggregate advancing/,
    );
  });

  it('strict: a real hole is quarantined with the reason; its successors say at once what they wait behind', async () => {
    const consumer = `hole-${randomUUID().slice(0, 8)}`;
    const ib = inbox({ consumer, ordering: 'strict', maxGapMs: 200 });
    const [h1, h2, h3, h4, h5, h6] = [1, 2, 3, 4, 5, 6].map((n) => message('hole', n)) as InboxMessage[];
    const apply = (m: InboxMessage) => ib.handle(m, (tx) => record(tx, m));
    expect((await apply(h1!)).status).toBe('processed');
    expect((await apply(h3!)).status).toBe('deferred');
    await new Promise((r) => setTimeout(r, 250));
    const root = await apply(h3!);
    expect(root).toMatchObject({ status: 'quarantined' });
    expect(root.reason).toMatch(/^gap not filled for 0\.\d s .*: waiting for sequence 2 of this aggregate$/);
    // The successors: parked on their first delivery, naming the event they wait behind.
    const behind = `waiting behind quarantined event ${h3!.eventId} (sequence 3)`;
    expect(await apply(h4!)).toEqual({ status: 'quarantined', reason: behind });
    expect(await apply(h5!)).toEqual({ status: 'quarantined', reason: behind });
    const parked = await listQuarantine(db.pool, { schema: db.schema, consumer });
    expect(parked.map((q) => [q.sequence, q.behindEventId])).toEqual([
      [3, null],
      [4, h3!.eventId],
      [5, h3!.eventId],
    ]);

    // Released (the operator decided sequence 2 will never come): all three, in order.
    const released = await releaseQuarantined(db.pool, {
      schema: db.schema,
      ids: [parked[0]!.id],
      reason: 'sequence 2 was never committed',
      actor: 'ops',
    });
    expect(released).toEqual([h3!.eventId, h4!.eventId, h5!.eventId]);
    expect((await ib.replayReleased((tx, e) => record(tx, e))).map((r) => r.status)).toEqual([
      'processed',
      'processed',
      'processed',
    ]);
    expect((await apply(h6!)).status).toBe('processed');
    const { rows } = await db.pool.query(
      `SELECT sequence FROM "${db.schema}".effects WHERE aggregate_id = 'hole' ORDER BY ctid`,
    );
    expect(rows.map((r) => r.sequence)).toEqual([1, 3, 4, 5, 6]);
    expect(await listQuarantine(db.pool, { schema: db.schema, consumer })).toEqual([]);
    // Sequence 2 arriving after all is stale: the operator let the aggregate go past it.
    expect((await apply(h2!)).status).toBe('stale');
  });

  it('strict with startSequence: an event quarantined before the start does not hold back the gap at the start', async () => {
    const ib = inbox({
      ordering: 'strict',
      startSequence: 100,
      accepts: [{ type: 'stock.reserved', schemaVersion: 2 }],
    });
    const apply = (m: InboxMessage) => ib.handle(m, (tx) => record(tx, m));
    // History the consumer joined after: an old version, quarantined (it is never applied).
    expect((await apply(message('start', 1, { schemaVersion: 1 }))).status).toBe('quarantined');
    const [m100, m101] = [
      message('start', 100, { schemaVersion: 2 }),
      message('start', 101, { schemaVersion: 2 }),
    ];
    // 101 before 100 (100's first delivery failed, say): it waits for 100, not behind sequence 1.
    const early = await apply(m101);
    expect(early).toMatchObject({ status: 'deferred' });
    expect(early.reason).toMatch(/waiting for sequence 100/);
    expect((await apply(m100)).status).toBe('processed');
    expect((await apply(m101)).status).toBe('processed');
  });

  it('strict: behind an event quarantined for its version, successors wait; released, they follow it in order', async () => {
    const consumer = `behind-${randomUUID().slice(0, 8)}`;
    const ib = inbox({
      consumer,
      ordering: 'strict',
      accepts: [{ type: 'stock.reserved', schemaVersion: 1 }],
    });
    const b1 = message('bv', 1);
    const b2 = message('bv', 2, { schemaVersion: 2 });
    const [b3, b4, b5] = [3, 4, 5].map((n) => message('bv', n)) as InboxMessage[];
    const apply = (m: InboxMessage) => ib.handle(m, (tx) => record(tx, m));
    expect((await apply(b1)).status).toBe('processed');
    // The successor can come first (another instance holds sequence 2): it waits, as a gap.
    expect((await apply(b3!)).status).toBe('deferred');
    expect((await apply(b2)).reason).toMatch(/schema version 2 of "stock.reserved" is not accepted/);
    const behind = `waiting behind quarantined event ${b2.eventId} (sequence 2)`;
    expect(await apply(b3!)).toEqual({ status: 'quarantined', reason: behind });
    expect(await apply(b4!)).toEqual({ status: 'quarantined', reason: behind });
    const [root] = await listQuarantine(db.pool, { schema: db.schema, consumer });
    expect(
      await releaseQuarantined(db.pool, { schema: db.schema, ids: [root!.id], reason: 'v2 is compatible' }),
    ).toEqual([b2.eventId, b3!.eventId, b4!.eventId]);
    // Meanwhile a later event arrives: behind a released event it waits for the replay.
    const waiting = await apply(b5!);
    expect(waiting.status).toBe('deferred');
    expect(waiting.reason).toBe(
      `waiting behind released event ${b2.eventId} (sequence 2), which replayReleased applies first`,
    );
    expect((await ib.replayReleased((tx, e) => record(tx, e))).map((r) => r.status)).toEqual([
      'processed',
      'processed',
      'processed',
    ]);
    expect((await apply(b5!)).status).toBe('processed');
    const { rows } = await db.pool.query(
      `SELECT sequence FROM "${db.schema}".effects WHERE aggregate_id = 'bv' ORDER BY ctid`,
    );
    expect(rows.map((r) => r.sequence)).toEqual([1, 2, 3, 4, 5]);
  });

  it('strict: when the replay of the blocking event fails again, its successors stay parked behind it', async () => {
    const consumer = `again-${randomUUID().slice(0, 8)}`;
    const ib = inbox({ consumer, ordering: 'strict', maxAttempts: 1 });
    const [a1, a2, a3] = [1, 2, 3].map((n) => message('again', n)) as InboxMessage[];
    const failing = async () => {
      throw new Error('downstream said no');
    };
    expect((await ib.handle(a1!, failing)).reason).toMatch(/handler failed 1 times: downstream said no/);
    expect((await ib.handle(a2!, (tx) => record(tx, a2!))).reason).toBe(
      `waiting behind quarantined event ${a1!.eventId} (sequence 1)`,
    );
    const ids = (await listQuarantine(db.pool, { schema: db.schema, consumer })).map((q) => q.id);
    await releaseQuarantined(db.pool, { schema: db.schema, ids: ids.slice(0, 1), reason: 'try again' });
    expect((await ib.replayReleased(failing)).map((r) => r.status)).toEqual(['quarantined', 'quarantined']);
    const parked = await listQuarantine(db.pool, { schema: db.schema, consumer });
    expect(parked.map((q) => [q.eventId, q.releasedAt])).toEqual([
      [a1!.eventId, null],
      [a2!.eventId, null],
    ]);
    expect((await ib.handle(a3!, (tx) => record(tx, a3!))).reason).toMatch(
      /waiting behind quarantined event/,
    );
  });

  it('strict: an event parked behind another while its release ran is released when that one is replayed', async () => {
    const consumer = `race-${randomUUID().slice(0, 8)}`;
    const ib = inbox({ consumer, ordering: 'strict', maxAttempts: 1 });
    const [r1, r2] = [message('race', 1), message('race', 2)];
    await ib.handle(r1, async () => {
      throw new Error('downstream said no');
    });
    expect((await ib.handle(r2, (tx) => record(tx, r2))).reason).toMatch(/waiting behind quarantined event/);
    const [root] = await listQuarantine(db.pool, { schema: db.schema, consumer });
    await releaseQuarantined(db.pool, { schema: db.schema, ids: [root!.id], reason: 'fixed downstream' });
    // As if sequence 2 had been parked just after the release ran.
    await db.pool.query(
      `UPDATE "${db.schema}".inbox_quarantine SET released_at = NULL, release_reason = NULL WHERE event_id = $1`,
      [r2.eventId],
    );
    expect((await ib.replayReleased((tx, e) => record(tx, e))).map((r) => r.status)).toEqual([
      'processed',
      'processed',
    ]);
    expect(await listQuarantine(db.pool, { schema: db.schema, consumer })).toEqual([]);
    expect([await effects(r1.eventId), await effects(r2.eventId)]).toEqual([1, 1]);
  });

  it('strict: two gaps quarantined about together end up one behind the other, released together', async () => {
    const consumer = `twin-${randomUUID().slice(0, 8)}`;
    const ib = inbox({ consumer, ordering: 'strict', maxGapMs: 200 });
    const [w1, w3, w4] = [message('twin', 1), message('twin', 3), message('twin', 4)];
    const apply = (m: InboxMessage) => ib.handle(m, (tx) => record(tx, m));
    await apply(w1);
    expect((await apply(w3)).status).toBe('deferred');
    expect((await apply(w4)).status).toBe('deferred');
    await new Promise((r) => setTimeout(r, 250));
    // Sequence 4 comes back first: its own budget is spent, nothing is quarantined before it yet.
    expect((await apply(w4)).reason).toMatch(/^gap not filled for .*: waiting for sequence 2/);
    expect((await apply(w3)).reason).toMatch(/^gap not filled for .*: waiting for sequence 2/);
    const parked = await listQuarantine(db.pool, { schema: db.schema, consumer });
    const row = (e: InboxMessage) => parked.find((q) => q.eventId === e.eventId)!;
    expect(row(w4)).toMatchObject({
      behindEventId: w3.eventId,
      reason: `waiting behind quarantined event ${w3.eventId} (sequence 3)`,
    });
    expect(
      await releaseQuarantined(db.pool, { schema: db.schema, ids: [row(w3).id], reason: 'no sequence 2' }),
    ).toEqual([w3.eventId, w4.eventId]);
    expect((await ib.replayReleased((tx, e) => record(tx, e))).map((r) => r.status)).toEqual([
      'processed',
      'processed',
    ]);
  });

  it('strict: a successor parked while its blocker is released and replayed is not left behind a vanished event', async () => {
    const consumer = `race-${randomUUID().slice(0, 8)}`;
    const ib = inbox({ consumer, ordering: 'strict', maxGapMs: 200 });
    const [x1, x3, x4, x5] = [1, 3, 4, 5].map((n) => message('race', n)) as InboxMessage[];
    const apply = (m: InboxMessage) => ib.handle(m, (tx) => record(tx, m));
    await apply(x1!);
    await apply(x3!);
    await new Promise((r) => setTimeout(r, 250));
    expect((await apply(x3!)).status).toBe('quarantined');
    const [root] = await listQuarantine(db.pool, { schema: db.schema, consumer });
    // Sequence 4's park is held up just after its handling saw 3 quarantined: another
    // transaction holds (uncommitted) a quarantine row with its key.
    const holder = await db.pool.connect();
    let parked: string | undefined;
    try {
      await holder.query('BEGIN');
      await holder.query(
        `INSERT INTO "${db.schema}".inbox_quarantine (consumer, event_id, aggregate_type, aggregate_id, sequence,
           event_type, schema_version, headers, payload, reason) VALUES ($1, $2, 'order', 'race', 4, 'x', 1, '{}', '', 'hold')`,
        [consumer, x4!.eventId],
      );
      const parking = apply(x4!);
      void parking.then((r) => {
        parked = r.status;
      });
      await waitFor(
        async () =>
          (
            await db.pool.query(
              `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
              [`%${db.schema}".inbox_quarantine%`],
            )
          ).rows[0].n > 0,
        { what: "sequence 4's park waiting" },
      );
      // Meanwhile the operator releases 3 and the replay applies it.
      await releaseQuarantined(db.pool, { schema: db.schema, ids: [root!.id], reason: 'no sequence 2' });
      const replaying = ib.replayReleased((tx, e) => record(tx, e));
      await Promise.race([replaying, new Promise((r) => setTimeout(r, 500))]);
      await holder.query('ROLLBACK');
      await parking;
      await replaying;
    } finally {
      holder.release();
    }
    // Sequence 4 (acknowledged: quarantined, or deferred and redelivered) is applied, never
    // left parked behind an event that is gone: the aggregate flows on.
    await ib.replayReleased((tx, e) => record(tx, e));
    if (parked === 'deferred') expect((await apply(x4!)).status).toBe('processed');
    expect((await apply(x5!)).status).toBe('processed');
    expect(await listQuarantine(db.pool, { schema: db.schema, consumer })).toEqual([]);
  });

  it('strict: two gaps whose budgets run out at the same moment still end up one behind the other', async () => {
    const consumer = `tie-${randomUUID().slice(0, 8)}`;
    const ib = inbox({ consumer, ordering: 'strict', maxGapMs: 200 });
    const [t1, t3, t4] = [message('tie', 1), message('tie', 3), message('tie', 4)];
    const apply = (m: InboxMessage) => ib.handle(m, (tx) => record(tx, m));
    await apply(t1);
    await apply(t3);
    await apply(t4);
    await new Promise((r) => setTimeout(r, 250));
    // Sequence 4's park is held up after its handling found nothing quarantined before it …
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(
        `INSERT INTO "${db.schema}".inbox_quarantine (consumer, event_id, aggregate_type, aggregate_id, sequence,
           event_type, schema_version, headers, payload, reason) VALUES ($1, $2, 'order', 'tie', 4, 'x', 1, '{}', '', 'hold')`,
        [consumer, t4.eventId],
      );
      const four = apply(t4);
      await waitFor(
        async () =>
          (
            await db.pool.query(
              `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
              [`%${db.schema}".inbox_quarantine%`],
            )
          ).rows[0].n > 0,
        { what: "sequence 4's park waiting" },
      );
      // … while another instance parks sequence 3, whose budget ran out too.
      const three = apply(t3);
      await Promise.race([three, new Promise((r) => setTimeout(r, 500))]);
      await holder.query('ROLLBACK');
      expect((await three).status).toBe('quarantined');
      expect((await four).status).toBe('quarantined');
    } finally {
      holder.release();
    }
    const parked = await listQuarantine(db.pool, { schema: db.schema, consumer });
    const row = (e: InboxMessage) => parked.find((q) => q.eventId === e.eventId)!;
    expect(row(t4).behindEventId).toBe(t3.eventId);
    expect(
      await releaseQuarantined(db.pool, { schema: db.schema, ids: [row(t3).id], reason: 'no sequence 2' }),
    ).toEqual([t3.eventId, t4.eventId]);
  });

  it('strict: a released event never skips a gap over an event quarantined before it', async () => {
    const consumer = `over-${randomUUID().slice(0, 8)}`;
    const ib = inbox({
      consumer,
      ordering: 'strict',
      maxGapMs: 100,
      accepts: [{ type: 'stock.reserved', schemaVersion: 1 }],
    });
    const [o1, o3] = [message('over', 1), message('over', 3)];
    const o2 = message('over', 2, { schemaVersion: 2 });
    const apply = (m: InboxMessage) => ib.handle(m, (tx) => record(tx, m));
    await apply(o1);
    await apply(o3);
    await new Promise((r) => setTimeout(r, 150));
    expect((await apply(o3)).status).toBe('quarantined');
    const [gap] = await listQuarantine(db.pool, { schema: db.schema, consumer });
    await releaseQuarantined(db.pool, { schema: db.schema, ids: [gap!.id], reason: 'sequence 2 is lost' });
    // Before the replay, sequence 2 does arrive, in a version this consumer does not accept.
    expect((await apply(o2)).reason).toMatch(/schema version 2/);
    const replay = await ib.replayReleased((tx, e) => record(tx, e));
    expect(replay).toEqual([
      { status: 'quarantined', reason: `waiting behind quarantined event ${o2.eventId} (sequence 2)` },
    ]);
    expect(await effects(o3.eventId)).toBe(0);
    const v2 = (await listQuarantine(db.pool, { schema: db.schema, consumer })).find(
      (q) => q.eventId === o2.eventId,
    );
    await releaseQuarantined(db.pool, { schema: db.schema, ids: [v2!.id], reason: 'v2 is compatible' });
    expect((await ib.replayReleased((tx, e) => record(tx, e))).map((r) => r.status)).toEqual([
      'processed',
      'processed',
    ]);
    const { rows } = await db.pool.query(
      `SELECT sequence FROM "${db.schema}".effects WHERE aggregate_id = 'over' ORDER BY ctid`,
    );
    expect(rows.map((r) => r.sequence)).toEqual([1, 2, 3]);
  });

  it('skip-stale skips older sequences (counted as seen); none applies everything', async () => {
    const skip = inbox({ ordering: 'skip-stale' });
    const [a1, a3, a2] = [message('k', 1), message('k', 3), message('k', 2)];
    expect((await skip.handle(a1, (tx) => record(tx, a1))).status).toBe('processed');
    expect((await skip.handle(a3, (tx) => record(tx, a3))).status).toBe('processed');
    expect((await skip.handle(a2, (tx) => record(tx, a2))).status).toBe('stale');
    expect(await effects(a2.eventId)).toBe(0);
    expect((await skip.handle(a2, (tx) => record(tx, a2))).status).toBe('duplicate');
    expect(skip.stats()).toEqual({
      processed: 2,
      duplicate: 1,
      stale: 1,
      deferred: 0,
      quarantined: 0,
      skipped: 0,
    });

    const none = inbox({ ordering: 'none' });
    const [b1, b3, b2] = [message('n', 1), message('n', 3), message('n', 2)];
    for (const m of [b1, b3, b2])
      expect((await none.handle(m, (tx) => record(tx, m))).status).toBe('processed');
  });

  it('an unknown schema version is quarantined with an actionable reason; other aggregates keep flowing', async () => {
    const ib = inbox({ accepts: [{ type: 'stock.reserved', schemaVersion: [1, 2] }] });
    const v3 = message('v', 1, { schemaVersion: 3 });
    const result = await ib.handle(v3, (tx) => record(tx, v3));
    expect(result.status).toBe('quarantined');
    expect(result.reason).toMatch(/schema version 3 of "stock.reserved" is not accepted \(accepts 1, 2\)/);
    const unknown = message('v', 2, { type: 'stock.teleported' });
    expect((await ib.handle(unknown, (tx) => record(tx, unknown))).reason).toMatch(/unknown event type/);
    const other = message('w', 1, { schemaVersion: 2 });
    expect((await ib.handle(other, (tx) => record(tx, other))).status).toBe('processed');
  });

  it('a payload failing its Standard Schema is quarantined; a valid one reaches the handler parsed', async () => {
    const ib = inbox({
      accepts: [
        { type: 'stock.reserved', schemaVersion: 1, schema: z.object({ qty: z.number().positive() }) },
      ],
    });
    const bad = message('z', 1, { payload: Buffer.from(JSON.stringify({ qty: -1 })) });
    expect((await ib.handle(bad, (tx) => record(tx, bad))).reason).toMatch(/fails validation/);
    const good = message('z2', 1);
    let seen: unknown;
    await ib.handle<{ qty: number }>(good, async (tx, e) => {
      seen = e.data;
      await record(tx, good);
    });
    expect(seen).toEqual({ qty: 1 });
  });

  it('handler errors defer (no effect) and, after maxAttempts, quarantine', async () => {
    const ib = inbox({ maxAttempts: 3 });
    const m = message('e', 1);
    const failing = async (tx: Parameters<typeof record>[0]) => {
      await record(tx, m);
      throw new Error('downstream said no');
    };
    expect(await ib.handle(m, failing)).toMatchObject({ status: 'deferred', attempts: 1 });
    expect(await ib.handle(m, failing)).toMatchObject({ status: 'deferred', attempts: 2 });
    const last = await ib.handle(m, failing);
    expect(last.status).toBe('quarantined');
    expect(last.reason).toMatch(/handler failed 3 times: downstream said no/);
    expect(await effects(m.eventId)).toBe(0);
  });

  it('deferrals on a gap are not handler failures: a handler failing after a gap is charged from 1', async () => {
    const ib = inbox({ ordering: 'strict', maxAttempts: 2 });
    const [f1, f2] = [message('fg', 1), message('fg', 2)];
    for (let i = 0; i < 3; i += 1)
      expect((await ib.handle(f2, (tx) => record(tx, f2))).status).toBe('deferred');
    await ib.handle(f1, (tx) => record(tx, f1));
    const failed = await ib.handle(f2, async () => {
      throw new Error('downstream said no');
    });
    expect(failed).toMatchObject({ status: 'deferred', attempts: 1 });
    expect((await ib.handle(f2, (tx) => record(tx, f2))).status).toBe('processed');
  });

  it('a handler that swallows a failed statement and returns is not answered processed: nothing was committed', async () => {
    const ib = inbox({ maxAttempts: 3 });
    const m = message('swallow', 1);
    const swallowing = async (tx: Parameters<typeof record>[0]) => {
      await record(tx, m);
      // The statement fails and the transaction is aborted; COMMIT then only rolls back.
      await tx.query('SELECT 1/0', []).catch(() => undefined);
    };
    const result = await ib.handle(m, swallowing);
    expect(result).toMatchObject({ status: 'deferred', attempts: 1 });
    expect(result.error?.message).toMatch(/aborted .*nothing was committed/);
    expect(await effects(m.eventId)).toBe(0);
    // Not acknowledged as done: the redelivery applies it.
    expect((await ib.handle(m, (tx) => record(tx, m))).status).toBe('processed');
    expect(await effects(m.eventId)).toBe(1);
  });

  it("the inbox's own statement timing out (a second instance holds the aggregate) is not charged to the handler", async () => {
    const consumer = `lock-${randomUUID().slice(0, 8)}`;
    const timed = new pg.Pool({ connectionString: DATABASE_URL, max: 2, statement_timeout: 300 });
    try {
      const a = createInbox({ pool: db.pool, consumer, schema: db.schema });
      const b = createInbox({ pool: timed, consumer, schema: db.schema, maxAttempts: 1 });
      const [m1, m2] = [message('lk', 1), message('lk', 2)];
      let holding!: () => void;
      const held = new Promise<void>((r) => {
        holding = r;
      });
      let finish!: () => void;
      const finished = new Promise<void>((r) => {
        finish = r;
      });
      // Instance a applies sequence 1 slowly: the aggregate's position row stays locked meanwhile.
      const first = a.handle(m1, async (tx) => {
        await record(tx, m1);
        holding();
        await finished;
      });
      await held;
      // Instance b's claim of sequence 2 waits for that lock past its statement_timeout: its
      // handler never ran, so it is no handler failure (maxAttempts 1 would quarantine it).
      const second = await b
        .handle(m2, (tx) => record(tx, m2))
        .then(
          (r) => r,
          (e: unknown) => e,
        );
      finish();
      expect(second).toMatchObject({ code: '57014' });
      expect((await first).status).toBe('processed');
      const { rows } = await db.pool.query(
        `SELECT (SELECT count(*)::int FROM "${db.schema}".inbox_attempts WHERE event_id = $1) AS attempts,
                (SELECT count(*)::int FROM "${db.schema}".inbox_quarantine WHERE event_id = $1) AS parked`,
        [m2.eventId],
      );
      expect(rows[0]).toEqual({ attempts: 0, parked: 0 });
      expect((await b.handle(m2, (tx) => record(tx, m2))).status).toBe('processed');
      expect(await effects(m2.eventId)).toBe(1);
    } finally {
      await timed.end();
    }
  });

  it("a handler's own call failing with a connection error (ECONNREFUSED) is charged and, after maxAttempts, quarantined", async () => {
    const ib = inbox({ maxAttempts: 2 });
    const m = message('refused', 1);
    // A real refused connection, as an HTTP client's call to a service that is down rejects with it.
    const refused = async (tx: Parameters<typeof record>[0]) => {
      await record(tx, m);
      await new Promise((_resolve, reject) => {
        net.connect(1, '127.0.0.1').on('error', reject);
      });
    };
    const first = await ib.handle(m, refused);
    expect(first).toMatchObject({ status: 'deferred', attempts: 1 });
    expect(first.error).toMatchObject({ code: 'ECONNREFUSED' });
    const last = await ib.handle(m, refused);
    expect(last.status).toBe('quarantined');
    expect(last.reason).toMatch(/^handler failed 2 times: connect ECONNREFUSED 127\.0\.0\.1:1/);
    expect(await effects(m.eventId)).toBe(0);
  });

  it('a transient database error in the handler (serialization failure) is not charged: handle rejects, nothing written', async () => {
    const ib = inbox({ maxAttempts: 1 });
    const m = message('tr', 1);
    const serializationFailure = async (tx: Parameters<typeof record>[0]) => {
      await record(tx, m);
      await tx.query(
        "DO $$ BEGIN RAISE EXCEPTION 'could not serialize access' USING ERRCODE = 'serialization_failure'; END $$",
        [],
      );
    };
    await expect(ib.handle(m, serializationFailure)).rejects.toMatchObject({ code: '40001' });
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM "${db.schema}".inbox_attempts WHERE event_id = $1`,
      [m.eventId],
    );
    expect(rows[0].n).toBe(0);
    expect(await effects(m.eventId)).toBe(0);
    expect((await ib.handle(m, (tx) => record(tx, m))).status).toBe('processed');
    expect(await effects(m.eventId)).toBe(1);
  });

  it('reads the envelope a tx-outbox publisher sends', () => {
    const sent = makeMessage({ aggregateId: 'env', sequence: 7, schemaVersion: 2 });
    const m = fromEnvelope(envelopeHeaders(sent, 'test'), sent.payload);
    expect(m).toMatchObject({ eventId: sent.eventId, aggregateId: 'env', sequence: 7, schemaVersion: 2 });
    expect(() => fromEnvelope({}, sent.payload)).toThrow(/headers.ce-id/);
  });
});

describe('inbox operations', () => {
  it('a quarantined message, released with a reason, is handled again by replayReleased (audited)', async () => {
    const consumer = `rel-${randomUUID().slice(0, 8)}`;
    const strictV1 = createInbox({
      pool: db.pool,
      consumer,
      schema: db.schema,
      accepts: [{ type: 'stock.reserved', schemaVersion: 1 }],
    });
    const v2 = message('r', 1, { schemaVersion: 2 });
    expect((await strictV1.handle(v2, (tx) => record(tx, v2))).status).toBe('quarantined');
    const [parked] = await listQuarantine(db.pool, { schema: db.schema, consumer });
    expect(parked).toMatchObject({ eventId: v2.eventId, schemaVersion: 2, releasedAt: null });
    const shown = await showQuarantined(db.pool, { schema: db.schema, id: parked!.id });
    expect(Buffer.from(shown!.payload!).toString()).toBe(Buffer.from(v2.payload).toString());
    await expect(
      releaseQuarantined(db.pool, { schema: db.schema, ids: [parked!.id], reason: '' }),
    ).rejects.toThrow(/reason/);
    expect(
      await releaseQuarantined(db.pool, {
        schema: db.schema,
        ids: [parked!.id],
        reason: 'v2 is compatible',
        actor: 'ops',
      }),
    ).toEqual([v2.eventId]);
    const results = await strictV1.replayReleased((tx, e) => record(tx, e));
    expect(results.map((r) => r.status)).toEqual(['processed']);
    expect(await effects(v2.eventId)).toBe(1);
    expect(await listQuarantine(db.pool, { schema: db.schema, consumer })).toEqual([]);
    const { rows } = await db.pool.query(
      `SELECT actor, action, reason FROM "${db.schema}".audit WHERE action = 'inbox-release'`,
    );
    expect(rows).toContainEqual({ actor: 'ops', action: 'inbox-release', reason: 'v2 is compatible' });
  });

  it('prune refuses a window shorter than the replay horizon, and deletes only old records', async () => {
    await expect(
      pruneInbox(db.pool, { schema: db.schema, dedupRetentionMs: 1000, replayHorizonMs: 60_000 }),
    ).rejects.toThrow(/shorter than the replay horizon/);
    const ib = inbox();
    const m = message('p', 1);
    await ib.handle(m, (tx) => record(tx, m));
    await db.pool.query(
      `UPDATE "${db.schema}".inbox SET processed_at = now() - interval '2 days' WHERE event_id = $1`,
      [m.eventId],
    );
    const pruned = await pruneInbox(db.pool, {
      schema: db.schema,
      dedupRetentionMs: 86_400_000,
      replayHorizonMs: 3_600_000,
    });
    expect(pruned).toBeGreaterThanOrEqual(1);
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM "${db.schema}".inbox WHERE event_id = $1`,
      [m.eventId],
    );
    expect(rows[0].n).toBe(0);
  });
});
