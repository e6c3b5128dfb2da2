/**
 * An event whose subject no JetStream stream captures gets 503 "no responders" at once, on a
 * healthy link, every time. That is the event's (or the configuration's) failure, not an
 * outage: it must cost attempts and go dead after maxAttempts, and must not put the relay in
 * outage backoff (one batch every few seconds for everything else) forever. Only when
 * JetStream itself does not answer (disabled, or the server still starting) is the 503 the
 * broker being unavailable.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isBrokerUnavailable } from '../../src/errors.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import { type NatsPublishMode, natsPublisher } from '../../src/publishers/nats/index.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { NATS_URL } from '../helpers/env.js';
import { makeMessage } from '../helpers/messages.js';
import { PrivateNats } from '../helpers/processes.js';

let db: TestDb;
let coreOnly: PrivateNats;

beforeAll(async () => {
  db = await createTestDb('nostream');
  coreOnly = await PrivateNats.start({ jetstream: false });
});
afterAll(async () => {
  await coreOnly?.destroy();
  await db?.close();
});

const silent = { debug() {}, info() {}, warn() {}, error() {} };

describe.each<NatsPublishMode>(['pipeline', 'client'])(
  'NATS subject no stream captures (%s mode)',
  (mode) => {
    it('costs attempts and goes dead while the other events flow at full speed', async () => {
      const tag = randomBytes(4).toString('hex');
      const prefix = `nostream${tag}`;
      const publisher = natsPublisher({
        url: NATS_URL,
        stream: `TXO_NOSTREAM_${tag}`,
        streamSubjects: [`${prefix}.ok.>`],
        timeoutMs: 2000,
        mode,
      });
      const relay = createRelay({
        pool: db.pool,
        publisher,
        schema: db.schema,
        pollIntervalMs: 50,
        batchSize: 10,
        maxAttempts: 3,
        backoff: { baseMs: 20, capMs: 50 },
        random: () => 0.5,
        logger: silent,
      });
      const lost: OutboxEvent = {
        aggregateType: 'order',
        aggregateId: `${prefix}-lost`,
        type: 'order.changed',
        topic: `${prefix}.elsewhere`,
        payload: { lost: true },
      };
      const ok: OutboxEvent[] = Array.from({ length: 60 }, (_, i) => ({
        aggregateType: 'order',
        aggregateId: `${prefix}-${i % 5}`,
        type: 'order.changed',
        topic: `${prefix}.ok.order`,
        payload: { i },
      }));
      try {
        await relay.start();
        await inTransaction(db.pool, (tx) => enqueue(tx, [lost, ...ok], { schema: db.schema }));
        await waitFor(
          async () => {
            const { rows } = await db.pool.query(`SELECT status FROM "${db.schema}".events`);
            return rows.length === 1 && rows[0].status === 'dead';
          },
          { timeoutMs: 8000, what: 'the unroutable event dead, the others delivered' },
        );
        const { rows } = await db.pool.query(`SELECT attempts, last_error FROM "${db.schema}".events`);
        expect(rows[0].attempts).toBe(3);
        expect(rows[0].last_error).toContain(`${prefix}.elsewhere`);
        expect(relay.stats().unavailable).toBe(0);
      } finally {
        await relay.stop({ timeout: 2000 });
        await db.pool.query(`DELETE FROM "${db.schema}".events`);
      }
    });

    it('is the broker being unavailable (no attempt) when JetStream itself does not answer', async () => {
      const publisher = natsPublisher({ url: coreOnly.url, timeoutMs: 1000, mode });
      try {
        const [outcome] = await publisher.publish(
          [makeMessage({ topic: 'nojs.order' })],
          new AbortController().signal,
        );
        expect(outcome!.ok).toBe(false);
        const error = (outcome as { error: Error }).error;
        expect(error.message).toMatch(/JetStream/);
        expect(isBrokerUnavailable(error)).toBe(true);
      } finally {
        await publisher.close();
      }
    });
  },
);
