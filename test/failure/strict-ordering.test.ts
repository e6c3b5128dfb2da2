/**
 * `strict` ordering under real faults, on the real NATS JetStream and PostgreSQL.
 *
 * 1. A consumer process killed (SIGKILL) twice while holding sequence N of an aggregate: the broker
 *    hides the held message until its ack wait runs out, while the successors are delivered and
 *    deferred again and again. With the inbox's default budgets nothing may be quarantined, and
 *    everything is applied once, in order. (Before, the budget was 50 deliveries per event in all,
 *    and the successors spent it.)
 * 2. A real hole (a sequence never published) ends in quarantine with a clear reason; the events
 *    after it say at once what they wait behind; released, they are applied in order and the
 *    aggregate flows again.
 *
 * The killed consumers are fixtures/consumer-process.mjs (the BUILT package) with `holdSequence`.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';
import { type NatsConnection, connect as natsConnect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeNats } from '../../src/consumers/nats.js';
import { createInbox, type HandleStatus, type InboxHandler } from '../../src/inbox/inbox.js';
import { listQuarantine, releaseQuarantined } from '../../src/inbox/quarantine.js';
import type { OutboxMessage } from '../../src/publishers/contract.js';
import { natsPublisher } from '../../src/publishers/nats.js';
import { createTestDb, type TestDb, waitFor } from '../helpers/db.js';
import { DATABASE_URL, NATS_URL } from '../helpers/env.js';
import { makeMessage, publishAll } from '../helpers/messages.js';
import { deleteStream } from '../helpers/nats-stream.js';
import { exited, startFixture } from '../helpers/processes.js';

const FIXTURE = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'consumer-process.mjs');
const tag = randomBytes(4).toString('hex');
const stream = `TXO_STRICT_${tag}`;
const subject = `strict${tag}.events`;

let db: TestDb;
let nc: NatsConnection;
const publisher = natsPublisher({ servers: NATS_URL, stream, subject: () => subject });

beforeAll(async () => {
  db = await createTestDb('strict_ordering');
  await db.pool.query(`CREATE TABLE "${db.schema}".effects (n bigserial, consumer text, event_id uuid)`);
  nc = await natsConnect({ servers: NATS_URL });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: stream, subjects: [`strict${tag}.>`], storage: StorageType.Memory });
});
afterAll(async () => {
  await publisher.close();
  await nc?.close();
  await deleteStream(NATS_URL, stream);
  await db?.close();
});

/** The event ids whose effect the consumer applied, in the order applied. */
async function applied(consumer: string): Promise<string[]> {
  const { rows } = await db.pool.query<{ event_id: string }>(
    `SELECT event_id FROM "${db.schema}".effects WHERE consumer = $1 ORDER BY n`,
    [consumer],
  );
  return rows.map((r) => r.event_id);
}

const effect =
  (consumer: string): InboxHandler =>
  (tx, event) =>
    tx.query(`INSERT INTO "${db.schema}".effects (consumer, event_id) VALUES ($1, $2)`, [
      consumer,
      event.eventId,
    ]);

const events = (aggregateId: string, sequences: number[]): OutboxMessage[] =>
  sequences.map((sequence) => makeMessage({ aggregateType: 'order', aggregateId, sequence }));

/** Statuses the inbox answered, per sequence. */
function tally() {
  const bySequence = new Map<number, HandleStatus[]>();
  return {
    bySequence,
    add(sequence: number, status: HandleStatus) {
      bySequence.set(sequence, [...(bySequence.get(sequence) ?? []), status]);
    },
    deferrals: (sequence: number) => (bySequence.get(sequence) ?? []).filter((s) => s === 'deferred').length,
  };
}

describe('failure: strict ordering through consumer crashes and a real hole (NATS)', () => {
  it('a consumer killed twice while holding sequence 2: nothing quarantined, all applied once, in order', async () => {
    const consumer = 'crashes';
    const durable = 'crashes';
    // Short ack wait and fast redelivery, so the successors are deferred many times meanwhile (the
    // old budget, 50 deliveries per event, was spent by them); the inbox's budgets are its defaults.
    const nats = { url: NATS_URL, stream, durable, ackWaitMs: 5000, deferMs: 50, deferCapMs: 1000 };
    const [e1, e2, e3, e4, e5] = events('held', [1, 2, 3, 4, 5]);
    const seen = tally();
    const children: ChildProcess[] = [];
    /** A consumer process that dies holding sequence 2; resolves with its lines once it died. */
    const crashingConsumer = async (before: () => Promise<void>) => {
      const fixture = startFixture(FIXTURE, {
        broker: 'nats',
        databaseUrl: DATABASE_URL,
        schema: db.schema,
        consumer,
        holdSequence: 2,
        giveUpMs: 60_000,
        ...nats,
      });
      children.push(fixture.child);
      const gone = exited(fixture.child);
      await waitFor(() => fixture.lines().some((l) => l['msg'] === 'consuming'), {
        timeoutMs: 15_000,
        what: 'the consumer process to consume',
      });
      await before();
      await gone;
      expect(fixture.child.signalCode).toBe('SIGKILL');
      const lines = fixture.lines();
      expect(lines.at(-1)).toEqual({ msg: 'holding; crashing', eventId: e2!.eventId, sequence: 2 });
      for (const l of lines)
        if (l['msg'] === 'handled') seen.add(l['sequence'] as number, l['status'] as HandleStatus);
      return lines;
    };
    try {
      // First: it applies 1, takes 2 and dies with it (JetStream hides 2 for the ack wait).
      await crashingConsumer(() => publishAll(publisher, [e1!, e2!]));
      // Second: the successors arrive while 2 is hidden, are deferred again and again; then 2
      // comes back to this one, which dies with it too.
      await crashingConsumer(() => publishAll(publisher, [e3!, e4!, e5!]));
      expect(seen.deferrals(3)).toBeGreaterThan(0);

      // The survivor, in process: 2 comes back after the ack wait; the rest follows it.
      const inbox = createInbox({ pool: db.pool, consumer, schema: db.schema });
      const running = await consumeNats({
        ...nats,
        inbox: {
          consumer,
          stats: () => inbox.stats(),
          replayReleased: (h, o) => inbox.replayReleased(h, o),
          async handle(message, handler) {
            const result = await inbox.handle(message, handler);
            seen.add(message.sequence, result.status);
            return result;
          },
        },
        handler: effect(consumer),
      });
      try {
        const quarantined = () => listQuarantine(db.pool, { schema: db.schema, consumer });
        await waitFor(
          async () => (await applied(consumer)).length === 5 || (await quarantined()).length > 0,
          {
            timeoutMs: 30_000,
            what: 'all five applied (or one quarantined)',
          },
        );
      } finally {
        await running.stop();
      }
      expect((await listQuarantine(db.pool, { schema: db.schema, consumer })).map((q) => q.reason)).toEqual(
        [],
      );
      expect(await applied(consumer)).toEqual([e1, e2, e3, e4, e5].map((e) => e!.eventId));
      expect([...seen.bySequence.values()].flat()).not.toContain('quarantined');
      // Deferred on every consumer, yet few times: the redelivery backs off.
      for (const sequence of [3, 4, 5]) {
        expect(seen.deferrals(sequence)).toBeGreaterThan(1);
        expect(seen.deferrals(sequence)).toBeLessThan(30);
      }
    } finally {
      for (const child of children)
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  }, 90_000);

  it('a sequence never published: quarantined with the reason, successors parked behind it at once; released, all flow in order', async () => {
    const consumer = 'hole';
    const inbox = createInbox({ pool: db.pool, consumer, schema: db.schema, maxGapMs: 1500 });
    const seen = tally();
    const running = await consumeNats({
      url: NATS_URL,
      stream,
      durable: 'hole',
      filterSubject: subject,
      deferMs: 100,
      deferCapMs: 400,
      inbox: {
        consumer,
        stats: () => inbox.stats(),
        replayReleased: (h, o) => inbox.replayReleased(h, o),
        async handle(message, handler) {
          if (message.aggregateId !== 'holed') return { status: 'duplicate' };
          const result = await inbox.handle(message, handler);
          seen.add(message.sequence, result.status);
          return result;
        },
      },
      handler: effect(consumer),
    });
    const [h1, h3, h4, h5, h6] = events('holed', [1, 3, 4, 5, 6]);
    try {
      await publishAll(publisher, [h1!, h3!, h4!]);
      await waitFor(
        async () => (await listQuarantine(db.pool, { schema: db.schema, consumer })).length === 2,
        {
          timeoutMs: 15_000,
          what: 'sequences 3 and 4 quarantined',
        },
      );
      // (By event: when both budgets run out about together, 4 may have been parked first.)
      const parked = await listQuarantine(db.pool, { schema: db.schema, consumer });
      const root = parked.find((q) => q.eventId === h3!.eventId);
      const after = parked.find((q) => q.eventId === h4!.eventId);
      expect(root).toMatchObject({ eventId: h3!.eventId, sequence: 3, behindEventId: null });
      expect(root!.reason).toMatch(
        /^gap not filled for \d\.\d s \(\d+ deliveries\) without the aggregate advancing: waiting for sequence 2 of this aggregate$/,
      );
      const behind = `waiting behind quarantined event ${h3!.eventId} (sequence 3)`;
      expect(after).toMatchObject({
        eventId: h4!.eventId,
        sequence: 4,
        behindEventId: h3!.eventId,
        reason: behind,
      });
      // 4 never waited longer than 3 did: parked on its first delivery after 3 was.
      expect(seen.deferrals(4)).toBeLessThanOrEqual(seen.deferrals(3) + 1);
      // A later event is parked on its first delivery.
      await publishAll(publisher, [h5!]);
      await waitFor(() => seen.bySequence.has(5), { what: 'sequence 5 handled' });
      expect(seen.bySequence.get(5)).toEqual(['quarantined']);

      // The operator: sequence 2 will never come. Releasing 3 releases what waits behind it.
      expect(
        await releaseQuarantined(db.pool, {
          schema: db.schema,
          ids: [root!.id],
          reason: 'sequence 2 was rolled back',
          actor: 'ops',
        }),
      ).toEqual([h3!.eventId, h4!.eventId, h5!.eventId]);
      expect((await inbox.replayReleased(effect(consumer))).map((r) => r.status)).toEqual([
        'processed',
        'processed',
        'processed',
      ]);
      // And the aggregate flows again through the broker.
      await publishAll(publisher, [h6!]);
      await waitFor(async () => (await applied(consumer)).length === 5, { what: 'sequence 6 applied' });
    } finally {
      await running.stop();
    }
    expect(await applied(consumer)).toEqual([h1, h3, h4, h5, h6].map((e) => e!.eventId));
    expect(await listQuarantine(db.pool, { schema: db.schema, consumer })).toEqual([]);
  }, 60_000);
});
