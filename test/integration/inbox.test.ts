import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createInbox, type InboxOptions } from '../../src/inbox/inbox.js';
import { fromEnvelope, type InboxMessage } from '../../src/inbox/message.js';
import {
  listQuarantine,
  pruneInbox,
  releaseQuarantined,
  showQuarantined,
} from '../../src/inbox/quarantine.js';
import { envelopeHeaders } from '../../src/publishers/envelope.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
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

function inbox(extra: Partial<InboxOptions> = {}) {
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

  it('skip-stale skips older sequences (counted as seen); none applies everything', async () => {
    const skip = inbox({ ordering: 'skip-stale' });
    const [a1, a3, a2] = [message('k', 1), message('k', 3), message('k', 2)];
    expect((await skip.handle(a1, (tx) => record(tx, a1))).status).toBe('processed');
    expect((await skip.handle(a3, (tx) => record(tx, a3))).status).toBe('processed');
    expect((await skip.handle(a2, (tx) => record(tx, a2))).status).toBe('stale');
    expect(await effects(a2.eventId)).toBe(0);
    expect((await skip.handle(a2, (tx) => record(tx, a2))).status).toBe('duplicate');
    expect(skip.stats()).toEqual({ processed: 2, duplicate: 1, stale: 1, deferred: 0, quarantined: 0 });

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
      pruneInbox(db.pool, { schema: db.schema, olderThanMs: 1000, replayHorizonMs: 60_000 }),
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
      olderThanMs: 86_400_000,
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
