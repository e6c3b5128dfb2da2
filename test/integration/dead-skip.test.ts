import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { createInbox, type HandleStatus } from '../../src/inbox/inbox.js';
import type { InboxMessage } from '../../src/inbox/message.js';
import type { OrderingPolicy } from '../../src/inbox/ordering.js';
import { releaseQuarantined } from '../../src/inbox/quarantine.js';
import { countDead, listDead, replayDead } from '../../src/ops/dead-letter.js';
import { showEvent } from '../../src/ops/dead-show.js';
import { skipDead } from '../../src/ops/dead-skip.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import type { OutboxMessage } from '../../src/publishers/contract.js';
import { defaultDestination } from '../../src/publishers/core/destination.js';
import { createRelay, type Relay } from '../../src/relay/polling/relay.js';
import { SKIPPED_EVENT_TYPE, skipMarkerOf } from '../../src/skip-marker.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

let db: TestDb;
const relays: Relay[] = [];
beforeAll(async () => {
  db = await createTestDb('dead_skip', { partitions: 4 });
});
afterEach(async () => {
  await Promise.all(relays.splice(0).map((r) => r.stop({ timeout: 2000 })));
  await db.pool.query(`DELETE FROM "${db.schema}".events`);
});
afterAll(async () => {
  await db?.close();
});

function relay(publisher: RecordingPublisher): Relay {
  const r = createRelay({ pool: db.pool, publisher, schema: db.schema, pollIntervalMs: 50, leaseMs: 3000 });
  relays.push(r);
  return r;
}

async function put(events: OutboxEvent[]): Promise<string[]> {
  const results = await inTransaction(db.pool, (tx) =>
    enqueue(tx, events, { schema: db.schema, notify: false }),
  );
  return results.map((r) => r.eventId);
}

/** Enqueues the events and marks those at `dead` indexes dead, as the relay would (no relay runs). */
async function putDead(events: OutboxEvent[], dead: number[], deadAgo = '0 s'): Promise<string[]> {
  const ids = await put(events);
  await db.pool.query(
    `UPDATE "${db.schema}".events SET status = 'dead', dead_at = now() - $2::interval, attempts = 1,
       last_error = 'permanent: refused' WHERE event_id = ANY ($1::uuid[])`,
    [dead.map((i) => ids[i]), deadAgo],
  );
  return ids;
}

async function row(eventId: string): Promise<Record<string, unknown> | undefined> {
  const { rows } = await db.pool.query(
    `SELECT status, event_type, attempts, payload, headers, topic, sequence::int AS sequence
     FROM "${db.schema}".events WHERE event_id = $1`,
    [eventId],
  );
  return rows[0];
}

async function auditOf(eventId: string): Promise<Record<string, unknown>[]> {
  const { rows } = await db.pool.query(
    `SELECT actor, action, reason, event_ids::text[] AS ids, events FROM "${db.schema}".audit
     WHERE $1::uuid = ANY (event_ids) ORDER BY id`,
    [eventId],
  );
  return rows;
}

/** What a consumer adapter hands the inbox for a published message. */
function asInbox(m: OutboxMessage): InboxMessage {
  return {
    eventId: m.eventId,
    type: m.type,
    aggregateType: m.aggregateType,
    aggregateId: m.aggregateId,
    sequence: m.sequence,
    schemaVersion: m.schemaVersion,
    contentType: m.contentType,
    payload: m.payload,
    headers: { ...m.headers },
  };
}

function marker(aggregateId: string, sequence: number): InboxMessage {
  return {
    eventId: randomUUID(),
    type: SKIPPED_EVENT_TYPE,
    aggregateType: 'order',
    aggregateId,
    sequence,
    schemaVersion: 1,
    payload: Buffer.from(
      JSON.stringify({
        skippedType: 'order.placed',
        skippedSchemaVersion: 1,
        reason: 'r',
        actor: 'a',
        at: 'now',
      }),
    ),
    headers: {},
  };
}

function plain(aggregateId: string, sequence: number): InboxMessage {
  return { ...marker(aggregateId, sequence), type: 'order.placed', payload: Buffer.from('{"n":1}') };
}

describe('dead skip', () => {
  it('replaces a dead event by its skip marker, which the relay publishes in order before the rest of the aggregate', async () => {
    const publisher = new RecordingPublisher();
    publisher.verdict = (m) =>
      m.type === 'order.bad'
        ? { ok: false, retryable: false, error: new Error('schema mismatch') }
        : { ok: true };
    const [bad, next] = await put([
      {
        aggregateType: 'order',
        aggregateId: 's1',
        type: 'order.bad',
        payload: { secret: 'kept in audit' },
        headers: { h: 'v' },
      },
      { aggregateType: 'order', aggregateId: 's1', type: 'order.ok', payload: { n: 2 } },
    ]);
    relay(publisher).start();
    await waitFor(async () => (await row(bad!))?.['status'] === 'dead', { what: 'dead event' });

    // A pending id is refused, and nothing is skipped with it.
    const refused = skipDead(db.pool, { schema: db.schema, eventIds: [bad!, next!], reason: 'bad payload' });
    await expect(refused).rejects.toThrow(OutboxValidationError);
    await expect(refused).rejects.toThrow(new RegExp(`${next} is pending, not dead`));
    await expect(skipDead(db.pool, { schema: db.schema, eventIds: [bad!], reason: '  ' })).rejects.toThrow(
      /reason/,
    );
    expect((await row(bad!))?.['status']).toBe('dead');

    // A dry run answers what would happen and changes nothing.
    const dry = await skipDead(db.pool, {
      schema: db.schema,
      eventIds: [bad!],
      reason: 'bad payload',
      dryRun: true,
    });
    expect(dry).toEqual({ skipped: [bad], notFound: [], published: true, dryRun: true });
    expect(await row(bad!)).toMatchObject({ status: 'dead', event_type: 'order.bad' });
    expect(await auditOf(bad!)).toEqual([]);

    const gone = randomUUID();
    const result = await skipDead(db.pool, {
      schema: db.schema,
      eventIds: [bad!.toUpperCase(), gone],
      reason: 'bad payload, compensated by hand',
      actor: 'alice',
    });
    expect(result).toEqual({ skipped: [bad], notFound: [gone], published: true, dryRun: false });

    await waitFor(() => publisher.received.length === 2, { what: 'marker and next event published' });
    const [m, n] = publisher.received;
    expect(m).toMatchObject({
      eventId: bad,
      type: SKIPPED_EVENT_TYPE,
      aggregateType: 'order',
      aggregateId: 's1',
      sequence: 1,
      headers: {},
      contentType: 'application/json',
      topic: null,
    });
    expect(skipMarkerOf(m!.payload)).toMatchObject({
      skippedType: 'order.bad',
      skippedSchemaVersion: 1,
      reason: 'bad payload, compensated by hand',
      actor: 'alice',
    });
    // The marker goes where the event would have gone, not to `order.tx-outbox.skipped`.
    expect(defaultDestination(m!)).toBe('order.order.bad');
    expect(n).toMatchObject({ eventId: next, sequence: 2, type: 'order.ok' });

    // The original row, payload and all, is in the audit trail with the operator and reason.
    const [audit] = await auditOf(bad!);
    expect(audit).toMatchObject({
      actor: 'alice',
      action: 'skip',
      reason: 'bad payload, compensated by hand',
      ids: [bad],
    });
    const original = (audit!['events'] as Record<string, unknown>[])[0]!;
    expect(original).toMatchObject({
      event_id: bad,
      event_type: 'order.bad',
      payload: { secret: 'kept in audit' },
      headers: { h: 'v' },
      status: 'dead',
      last_error: 'permanent: schema mismatch',
    });

    // dead show: the row is gone (delivered), the history and the original remain.
    const shown = await showEvent(db.pool, { schema: db.schema, eventId: bad! });
    expect(shown.event).toBeNull();
    expect(shown.audit).toMatchObject([
      { actor: 'alice', action: 'skip', eventCount: 1, original: { event_type: 'order.bad' } },
    ]);

    // The strict consumer sees the marker in order, records it as skipped, and applies the next event.
    const inbox = createInbox({
      pool: db.pool,
      consumer: 'strict-e2e',
      schema: db.schema,
      accepts: [{ type: 'order.ok', schemaVersion: 1 }],
    });
    let ran = 0;
    const statuses: HandleStatus[] = [];
    for (const message of publisher.received) {
      statuses.push(
        (
          await inbox.handle(asInbox(message), async () => {
            ran += 1;
          })
        ).status,
      );
    }
    expect(statuses).toEqual(['skipped', 'processed']);
    expect(ran).toBe(1);
  });

  it('refuses to re-mark a dead skip marker, which --no-publish then removes', async () => {
    const [id] = await putDead(
      [{ aggregateType: 'order', aggregateId: 's2', type: 'order.placed', payload: 1 }],
      [0],
    );
    await skipDead(db.pool, { schema: db.schema, eventIds: [id!], reason: 'first' });
    // Its destination refused the marker too.
    await db.pool.query(
      `UPDATE "${db.schema}".events SET status = 'dead', dead_at = now() WHERE event_id = $1`,
      [id],
    );
    await expect(skipDead(db.pool, { schema: db.schema, eventIds: [id!], reason: 'again' })).rejects.toThrow(
      /skip marker that went dead.*--no-publish/,
    );
    const done = await skipDead(db.pool, {
      schema: db.schema,
      eventIds: [id!],
      reason: 'again',
      publish: false,
    });
    expect(done.skipped).toEqual([id]);
    expect(await row(id!)).toBeUndefined();
    expect((await auditOf(id!)).map((a) => a['action'])).toEqual(['skip', 'skip-unpublished']);
  });

  it('refuses a marker for a repeated sequence (sequence_repeat), which --no-publish then removes', async () => {
    // What the relay leaves: order/rep delivered 2, a second event with sequence 2 dead.
    const [id] = await putDead(
      [{ aggregateType: 'order', aggregateId: 'rep', type: 'order.placed', payload: 1, sequence: 2 }],
      [0],
    );
    await db.pool.query(
      `INSERT INTO "${db.schema}".aggregate_progress (aggregate_type, aggregate_id, delivered_sequence)
       VALUES ('order', 'rep', 2)`,
    );
    const refused = skipDead(db.pool, { schema: db.schema, eventIds: [id!], reason: 'marker' });
    await expect(refused).rejects.toThrow(OutboxValidationError);
    await expect(refused).rejects.toThrow(
      /repeats a sequence its aggregate already delivered \(sequence 2, delivered 2\).*--no-publish/,
    );
    expect(await row(id!)).toMatchObject({ status: 'dead', event_type: 'order.placed' });
    expect(await auditOf(id!)).toEqual([]);
    const done = await skipDead(db.pool, {
      schema: db.schema,
      eventIds: [id!],
      reason: 'gone',
      publish: false,
    });
    expect(done.skipped).toEqual([id]);
    expect(await row(id!)).toBeUndefined();
  });

  it('--no-publish removes the event, moves its aggregate past it, and the relay goes on with the next', async () => {
    const [a1, a2, a3] = await putDead(
      [
        { aggregateType: 'order', aggregateId: 'np', type: 'order.placed', payload: 1 },
        { aggregateType: 'order', aggregateId: 'np', type: 'order.placed', payload: 2 },
        { aggregateType: 'order', aggregateId: 'np', type: 'order.placed', payload: 3 },
      ],
      [1],
    );
    // Sequence 2 waits behind 1, still pending: removing it would leave a hole the gate never passes.
    await expect(
      skipDead(db.pool, { schema: db.schema, eventIds: [a2!], reason: 'x', publish: false }),
    ).rejects.toThrow(/waits behind sequence 1/);
    const publisher = new RecordingPublisher();
    relay(publisher).start();
    await waitFor(() => publisher.received.length === 1, { what: 'sequence 1' });
    await db.pool.query(
      `INSERT INTO "${db.schema}".aggregate_progress (aggregate_type, aggregate_id, delivered_sequence, blocked_until)
       VALUES ('order', 'np', 1, 'infinity') ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET blocked_until = 'infinity'`,
    );
    const dry = await skipDead(db.pool, {
      schema: db.schema,
      eventIds: [a2!],
      reason: 'x',
      publish: false,
      dryRun: true,
    });
    expect(dry).toMatchObject({ skipped: [a2], published: false, dryRun: true });
    expect((await row(a2!))?.['status']).toBe('dead');
    await skipDead(db.pool, {
      schema: db.schema,
      eventIds: [a2!],
      reason: 'destination gone',
      publish: false,
      actor: 'bob',
    });
    await waitFor(() => publisher.received.length === 2, { what: 'sequence 3' });
    expect(publisher.received.map((m) => [m.eventId, m.sequence])).toEqual([
      [a1, 1],
      [a3, 3],
    ]);
    // The broker has sequence 3; the relay records its outcome just after.
    const progress = async () =>
      (
        await db.pool.query(
          `SELECT delivered_sequence::int AS d, blocked_until FROM "${db.schema}".aggregate_progress WHERE aggregate_id = 'np'`,
        )
      ).rows;
    await waitFor(
      async () =>
        Number(
          (await db.pool.query(`SELECT count(*) AS n FROM "${db.schema}".events WHERE aggregate_id = 'np'`))
            .rows[0].n,
        ) === 0,
      { what: 'sequence 3 recorded' },
    );
    // The skip moved the progress past 2 and unblocked it; sequence 3 names its previous event
    // (015_previous_id.sql): its delivery writes no progress.
    expect(await progress()).toEqual([{ d: 2, blocked_until: null }]);
    const [audit] = await auditOf(a2!);
    expect(audit).toMatchObject({ actor: 'bob', action: 'skip-unpublished', reason: 'destination gone' });
    expect((audit!['events'] as Record<string, unknown>[])[0]).toMatchObject({
      event_id: a2,
      sequence: 2,
      payload: 2,
    });

    // A strict consumer sees the gap: deferred, then quarantined when its budget is spent; the
    // operator releases it and the consumer goes past the hole.
    const inbox = createInbox({ pool: db.pool, consumer: 'strict-gap', schema: db.schema, maxDeferrals: 2 });
    const [m1, m3] = publisher.received.map(asInbox);
    const noop = async () => {};
    expect((await inbox.handle(m1!, noop)).status).toBe('processed');
    expect((await inbox.handle(m3!, noop)).status).toBe('deferred');
    const parked = await inbox.handle(m3!, noop);
    expect(parked).toMatchObject({ status: 'quarantined', reason: expect.stringMatching(/^gap not filled/) });
    const { rows: q } = await db.pool.query(
      `SELECT id::text AS id FROM "${db.schema}".inbox_quarantine WHERE consumer = 'strict-gap' AND event_id = $1`,
      [a3],
    );
    await releaseQuarantined(db.pool, {
      schema: db.schema,
      ids: [q[0].id],
      reason: 'sequence 2 skipped without a marker',
    });
    expect((await inbox.replayReleased(noop)).map((r) => r.status)).toEqual(['processed']);
  });

  it('keeps a bytes payload in the audit trail, and no secret of a URL the reason quotes', async () => {
    const [id] = await putDead(
      [{ aggregateType: 'blob', aggregateId: 'b1', type: 'blob.put', payload: Buffer.from([7, 8, 9]) }],
      [0],
    );
    await skipDead(db.pool, {
      schema: db.schema,
      eventIds: [id!],
      reason: 'https://user:hunter2@example.com/hook?token=abc refuses it',
    });
    const { event, audit } = await showEvent(db.pool, { schema: db.schema, eventId: id! });
    expect(event).toMatchObject({ type: SKIPPED_EVENT_TYPE, status: 'pending', attempts: 0, headers: {} });
    expect(audit[0]!.original).toMatchObject({
      payload: null,
      payload_bytes: '\\x070809',
      event_type: 'blob.put',
    });
    expect(audit[0]!.reason).not.toContain('hunter2');
    expect(audit[0]!.reason).not.toContain('abc');
    expect(event!.payloadPreview).not.toContain('hunter2');
  });

  it('dead show gives every column, the last error, headers, payload preview and audit history', async () => {
    const [id] = await putDead(
      [
        {
          aggregateType: 'order',
          aggregateId: 'sh',
          type: 'order.placed',
          payload: { big: 'x'.repeat(600) },
          headers: { h: 'v' },
          topic: 'orders',
        },
      ],
      [0],
    );
    await replayDead(db.pool, { schema: db.schema, eventIds: [id!], reason: 'try again', actor: 'carol' });
    await db.pool.query(
      `UPDATE "${db.schema}".events SET status = 'dead', dead_at = now() WHERE event_id = $1`,
      [id],
    );
    const { event, audit } = await showEvent(db.pool, { schema: db.schema, eventId: id! });
    expect(event).toMatchObject({
      eventId: id,
      aggregateType: 'order',
      aggregateId: 'sh',
      sequence: 1,
      type: 'order.placed',
      schemaVersion: 1,
      topic: 'orders',
      status: 'dead',
      headers: { h: 'v' },
    });
    expect(event!.payloadPreview).toHaveLength(500);
    expect(event!.payloadBytes).toBeGreaterThan(600);
    expect(audit).toMatchObject([{ actor: 'carol', action: 'replay', reason: 'try again', eventCount: 1 }]);
    expect(audit[0]).not.toHaveProperty('original');
    await expect(showEvent(db.pool, { schema: db.schema, eventId: 'nope' })).rejects.toThrow(/not a UUID/);
  });
});

describe('dead list and replay filters', () => {
  it('select by aggregate, type and dead-since; replay --all with a filter replays only those; a dry run nothing', async () => {
    const ids = await putDead(
      [
        { aggregateType: 'order', aggregateId: 'f1', type: 'order.placed', payload: 1 },
        { aggregateType: 'order', aggregateId: 'f2', type: 'order.paid', payload: 1 },
        { aggregateType: 'cart', aggregateId: 'f1', type: 'cart.added', payload: 1 },
        { aggregateType: 'order', aggregateId: 'f3', type: 'order.placed', payload: 1 },
      ],
      [0, 1, 2],
    );
    await db.pool.query(
      `UPDATE "${db.schema}".events SET status = 'dead', dead_at = now() - interval '3 hours' WHERE event_id = $1`,
      [ids[3]],
    );
    const idsOf = async (filter: Parameters<typeof listDead>[1]) =>
      (await listDead(db.pool, { schema: db.schema, ...filter })).map((e) => e.eventId).sort();
    const sorted = (...xs: (string | undefined)[]) => (xs as string[]).sort();
    expect(await idsOf({})).toEqual(sorted(...ids));
    expect(await idsOf({ aggregateType: 'order' })).toEqual(sorted(ids[0], ids[1], ids[3]));
    expect(await idsOf({ aggregateType: 'order', aggregateId: 'f1' })).toEqual([ids[0]]);
    expect(await idsOf({ aggregateId: 'f1' })).toEqual(sorted(ids[0], ids[2]));
    expect(await idsOf({ type: 'order.placed' })).toEqual(sorted(ids[0], ids[3]));
    expect(await idsOf({ since: new Date(Date.now() - 3_600_000) })).toEqual(sorted(ids[0], ids[1], ids[2]));
    // A filter value is a parameter, never SQL.
    expect(await idsOf({ type: "x' OR true --" })).toEqual([]);
    expect(await countDead(db.pool, { schema: db.schema, type: 'order.placed' })).toBe(2);

    const dry = await replayDead(db.pool, {
      schema: db.schema,
      eventIds: 'all',
      filter: { type: 'order.placed' },
      reason: 'fixed',
      dryRun: true,
    });
    expect(dry.sort()).toEqual(sorted(ids[0], ids[3]));
    expect(await countDead(db.pool, { schema: db.schema })).toBe(4);
    const { rows: none } = await db.pool.query(
      `SELECT count(*)::int AS n FROM "${db.schema}".audit WHERE reason = 'fixed'`,
    );
    expect(none[0].n).toBe(0);

    const replayed = await replayDead(db.pool, {
      schema: db.schema,
      eventIds: 'all',
      filter: { type: 'order.placed', since: new Date(Date.now() - 3_600_000) },
      reason: 'fixed',
    });
    expect(replayed).toEqual([ids[0]]);
    expect((await idsOf({})).length).toBe(3);
  });
});

describe('the inbox and a skip marker', () => {
  const policies: OrderingPolicy[] = ['strict', 'skip-stale', 'none'];
  for (const ordering of policies) {
    it(`under ${ordering}: recorded as skipped, no handler, the position moves past it`, async () => {
      const consumer = `skip-${ordering}-${randomUUID().slice(0, 6)}`;
      // `accepts` does not list the marker's type: it is recognised, not quarantined as unknown.
      const inbox = createInbox({
        pool: db.pool,
        consumer,
        schema: db.schema,
        ordering,
        accepts: [{ type: 'order.placed', schemaVersion: 1 }],
      });
      const handled: number[] = [];
      const handler = async (_tx: unknown, e: InboxMessage) => {
        handled.push(e.sequence);
      };
      const m1 = plain('agg', 1);
      const skip2 = marker('agg', 2);
      const m3 = plain('agg', 3);
      expect((await inbox.handle(m1, handler)).status).toBe('processed');
      expect(await inbox.handle(skip2, handler)).toEqual({ status: 'skipped' });
      expect((await inbox.handle(skip2, handler)).status).toBe('duplicate');
      expect((await inbox.handle(m3, handler)).status).toBe('processed');
      expect(handled).toEqual([1, 3]);
      const { rows } = await db.pool.query(
        `SELECT sequence::int AS sequence, outcome FROM "${db.schema}".inbox WHERE consumer = $1 ORDER BY sequence`,
        [consumer],
      );
      expect(rows).toEqual([
        { sequence: 1, outcome: 'processed' },
        { sequence: 2, outcome: 'skipped' },
        { sequence: 3, outcome: 'processed' },
      ]);
      expect(inbox.stats()).toMatchObject({ processed: 2, skipped: 1, duplicate: 1, quarantined: 0 });
    });
  }

  it('under strict a marker waits its turn like any event (a gap before it defers it)', async () => {
    const inbox = createInbox({
      pool: db.pool,
      consumer: `skip-gap-${randomUUID().slice(0, 6)}`,
      schema: db.schema,
    });
    const noop = async () => {};
    const skip2 = marker('early', 2);
    expect((await inbox.handle(skip2, noop)).status).toBe('deferred');
    expect((await inbox.handle(plain('early', 1), noop)).status).toBe('processed');
    expect((await inbox.handle(skip2, noop)).status).toBe('skipped');
    expect((await inbox.handle(plain('early', 3), noop)).status).toBe('processed');
  });

  it('a marker a 0.1 inbox quarantined as unknown is skipped once released and replayed', async () => {
    const consumer = `skip-old-${randomUUID().slice(0, 6)}`;
    const skip1 = marker('old', 1);
    // What a 0.1 inbox left: the marker parked as an unknown type.
    await db.pool.query(
      `INSERT INTO "${db.schema}".inbox_quarantine (consumer, event_id, aggregate_type, aggregate_id, sequence,
         event_type, schema_version, headers, payload, reason)
       VALUES ($1, $2, 'order', 'old', 1, $3, 1, '{}', $4, 'unknown event type')`,
      [consumer, skip1.eventId, SKIPPED_EVENT_TYPE, Buffer.from(skip1.payload)],
    );
    const { rows } = await db.pool.query(
      `SELECT id::text AS id FROM "${db.schema}".inbox_quarantine WHERE event_id = $1`,
      [skip1.eventId],
    );
    await releaseQuarantined(db.pool, { schema: db.schema, ids: [rows[0].id], reason: 'upgraded' });
    const inbox = createInbox({ pool: db.pool, consumer, schema: db.schema });
    let ran = 0;
    const handler = async () => {
      ran += 1;
    };
    expect((await inbox.replayReleased(handler)).map((r) => r.status)).toEqual(['skipped']);
    expect((await inbox.handle(plain('old', 2), handler)).status).toBe('processed');
    expect(ran).toBe(1);
  });
});

describe('enqueue', () => {
  it("refuses an event type starting with 'tx-outbox.' (the skip marker's is tx-outbox's own)", async () => {
    await expect(
      put([{ aggregateType: 'order', aggregateId: 'r', type: SKIPPED_EVENT_TYPE, payload: {} }]),
    ).rejects.toThrow(/type.*tx-outbox\./);
  });
});
