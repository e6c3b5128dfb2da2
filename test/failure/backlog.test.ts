/**
 * A backlog of 100,000 events over 5,000 aggregates drains completely through
 * the relay into a real JetStream stream, in per-aggregate order. Prints the
 * drain rate and the claim latency seen with the backlog (figures, not
 * assertions: speed is judged by bench/, not by timed tests).
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enqueue } from '../../src/producer/enqueue.js';
import { natsPublisher } from '../../src/publishers/nats/index.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { NATS_URL } from '../helpers/env.js';
import { deleteStream, orderViolations, readStream } from '../helpers/nats-stream.js';

const TOTAL = Number(process.env['TXO_BACKLOG_EVENTS'] ?? 100_000);
const AGGREGATES = 5_000;

let db: TestDb;
const tag = randomBytes(4).toString('hex');
const stream = `TXO_BACKLOG_${tag}`;
beforeAll(async () => {
  db = await createTestDb('backlog');
});
afterAll(async () => {
  await deleteStream(NATS_URL, stream);
  await db?.close();
});

describe('backlog', () => {
  it(`drains ${TOTAL} pending events completely, in order`, async () => {
    const filler = 'x'.repeat(240);
    const insertStarted = performance.now();
    for (let start = 0; start < TOTAL; start += 1000) {
      const events = Array.from({ length: Math.min(1000, TOTAL - start) }, (_, k) => {
        const i = start + k;
        return {
          aggregateType: 'order',
          aggregateId: `o${i % AGGREGATES}`,
          type: 'order.changed',
          topic: `backlog${tag}.order`,
          payload: { i, filler },
        };
      });
      await inTransaction(db.pool, (tx) => enqueue(tx, events, { schema: db.schema, notify: false }));
    }
    const insertSeconds = (performance.now() - insertStarted) / 1000;

    const publisher = natsPublisher({ url: NATS_URL, stream, streamSubjects: [`backlog${tag}.>`] });
    const relay = createRelay({ pool: db.pool, publisher, schema: db.schema, batchSize: 1000 });
    const started = performance.now();
    await relay.start();
    await waitFor(
      async () => {
        const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".events`);
        return rows[0].n === 0;
      },
      { timeoutMs: 240_000, intervalMs: 200, what: 'the backlog to drain' },
    );
    const seconds = (performance.now() - started) / 1000;
    const stats = relay.stats();
    await relay.stop();
    await publisher.close();

    const t = stats.timings;
    console.log(
      `[backlog] ${TOTAL} events over ${AGGREGATES} aggregates: inserted in ${insertSeconds.toFixed(1)} s; ` +
        `drained in ${seconds.toFixed(1)} s = ${Math.round(TOTAL / seconds)} events/s; ${stats.batches} batches; ` +
        `claim ${t.claim.mean.toFixed(1)} ms mean / ${t.claim.max.toFixed(1)} ms max, ` +
        `publish ${t.publish.mean.toFixed(1)} / ${t.publish.max.toFixed(1)} ms, ` +
        `record ${t.record.mean.toFixed(1)} / ${t.record.max.toFixed(1)} ms per batch`,
    );
    expect(stats.published).toBe(TOTAL);
    expect(stats.dead).toBe(0);
    const stored = await readStream(NATS_URL, stream);
    expect(stored).toHaveLength(TOTAL);
    expect(new Set(stored.map((s) => s.eventId)).size).toBe(TOTAL);
    expect(orderViolations(stored)).toEqual([]);
  }, 600_000);
});
