/**
 * `dead skip` end to end through the real NATS publisher and consumer adapter: a dead event is
 * skipped, its marker is published in its place (the publisher's envelope and header checks take
 * it), the strict inbox records it as skipped and the next event of the aggregate is applied.
 */
import { randomUUID } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeNats } from '../../src/consumers/nats.js';
import { PublishError } from '../../src/errors.js';
import { createInbox } from '../../src/inbox/inbox.js';
import { skipDead } from '../../src/ops/dead-skip.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { Publisher } from '../../src/publishers/contract.js';
import { ensureStream, natsPublisher } from '../../src/publishers/nats/index.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { NATS_URL } from '../helpers/env.js';
import { readStream } from '../helpers/nats-stream.js';

const suffix = randomUUID().slice(0, 8);
const ROOT = `txo-skip-${suffix}`;
const STREAM = `TXO_SKIP_${suffix}`;

let db: TestDb;
let nc: NatsConnection;
beforeAll(async () => {
  db = await createTestDb('dead_skip_nats', { partitions: 2 });
  nc = await connect({ servers: NATS_URL });
  await ensureStream(nc, { name: STREAM, subjects: [`${ROOT}.>`] });
});
afterAll(async () => {
  await (await jetstreamManager(nc)).streams.delete(STREAM).catch(() => false);
  await nc?.close();
  await db?.close();
});

/** The real NATS publisher, except that the destination refuses `order.poison` for good. */
function refusingPoison(nats: Publisher): Publisher {
  return {
    name: 'nats',
    async publish(batch, signal) {
      const ok = batch.filter((m) => m.type !== 'order.poison');
      const outcomes = await nats.publish(ok, signal);
      return batch.map((m) =>
        m.type === 'order.poison'
          ? { ok: false, retryable: false, error: new PublishError('schema rejected', { retryable: false }) }
          : outcomes[ok.indexOf(m)]!,
      );
    },
    close: () => nats.close(),
  };
}

describe('dead skip through NATS', () => {
  it('dead event → skip → marker delivered → strict inbox advances → the next event is processed', async () => {
    const aggregate = { aggregateType: ROOT, aggregateId: 'order-7' };
    const [first, poison, third] = await inTransaction(db.pool, (tx) =>
      enqueue(
        tx,
        [
          { ...aggregate, type: 'order.placed', payload: { n: 1 } },
          {
            ...aggregate,
            type: 'order.poison',
            payload: { n: 2 },
            headers: { 'x-note': 'dropped by the skip' },
          },
          { ...aggregate, type: 'order.placed', payload: { n: 3 } },
        ],
        { schema: db.schema },
      ),
    );
    const relay = createRelay({
      pool: db.pool,
      publisher: refusingPoison(natsPublisher({ url: NATS_URL, stream: STREAM })),
      schema: db.schema,
      pollIntervalMs: 50,
      leaseMs: 3000,
    });
    const seen: number[] = [];
    const inbox = createInbox({
      pool: db.pool,
      consumer: 'billing',
      schema: db.schema,
      ordering: 'strict',
      accepts: [{ type: 'order.placed', schemaVersion: 1 }],
    });
    const consumer = await consumeNats({
      inbox,
      handler: async (_tx, event) => {
        seen.push(event.sequence);
      },
      client: nc,
      stream: STREAM,
      durable: `billing-${suffix}`,
    });
    try {
      await relay.start();
      await waitFor(
        async () => {
          const { rows } = await db.pool.query(
            `SELECT status FROM "${db.schema}".events WHERE event_id = $1`,
            [poison!.eventId],
          );
          return rows[0]?.status === 'dead';
        },
        { what: 'the poison event dead' },
      );
      await waitFor(() => seen.length === 1, { what: 'sequence 1 applied' });

      await skipDead(db.pool, {
        schema: db.schema,
        eventIds: [poison!.eventId],
        reason: 'billing cannot take it; refunded by hand',
        actor: 'ops',
      });
      await waitFor(() => seen.length === 2, {
        what: 'sequence 3 applied after the marker',
        timeoutMs: 15_000,
      });
    } finally {
      await consumer.stop();
      await relay.stop({ timeout: 2000 });
    }
    expect(seen).toEqual([1, 3]);
    expect(inbox.stats()).toMatchObject({ processed: 2, skipped: 1, quarantined: 0 });
    const { rows } = await db.pool.query(
      `SELECT event_id::text AS event_id, sequence::int AS sequence, outcome FROM "${db.schema}".inbox
       WHERE consumer = 'billing' ORDER BY sequence`,
    );
    expect(rows).toEqual([
      { event_id: first!.eventId, sequence: 1, outcome: 'processed' },
      { event_id: poison!.eventId, sequence: 2, outcome: 'skipped' },
      { event_id: third!.eventId, sequence: 3, outcome: 'processed' },
    ]);
    // The marker went to the subject the event would have had, with the event's id (the broker's dedup key).
    const stored = await readStream(NATS_URL, STREAM);
    expect(stored.map((m) => [m.subject, m.eventId, m.sequence])).toEqual([
      [`${ROOT}.order.placed`, first!.eventId, 1],
      [`${ROOT}.order.poison`, poison!.eventId, 2],
      [`${ROOT}.order.placed`, third!.eventId, 3],
    ]);
  });
});
