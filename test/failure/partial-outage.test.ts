/**
 * One destination down, the others fine: a relay feeding NATS and a webhook receiver through
 * routerPublisher, with the receiver not running (connection refused: the broker is
 * unavailable, no attempt). The events for the receiver wait, unharmed, and are retried with
 * backoff; the events for NATS must keep flowing at full speed, not one batch per outage
 * backoff (up to 5 s) for as long as the receiver is down.
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import { natsPublisher } from '../../src/publishers/nats/index.js';
import { routerPublisher } from '../../src/publishers/router.js';
import { webhookPublisher } from '../../src/publishers/webhook/index.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { NATS_URL } from '../helpers/env.js';
import { freePort } from '../helpers/processes.js';

let db: TestDb;

beforeAll(async () => {
  db = await createTestDb('partial');
});
afterAll(async () => {
  await db?.close();
});

interface Line {
  readonly level: string;
  readonly msg: string;
}

it('a destination that is down does not slow the others, and its events wait unharmed', async () => {
  const tag = randomBytes(4).toString('hex');
  const nats = natsPublisher({
    url: NATS_URL,
    stream: `TXO_PARTIAL_${tag}`,
    streamSubjects: [`partial${tag}.>`],
  });
  const port = await freePort();
  const hook = webhookPublisher({
    endpoints: `http://127.0.0.1:${port}/events`,
    secret: 'a-test-secret',
  });
  const publisher = routerPublisher({
    routes: [{ match: { aggregateType: 'hook' }, publisher: hook }],
    fallback: nats,
  });
  const lines: Line[] = [];
  const at =
    (level: string) =>
    (_obj: object, msg = '') =>
      lines.push({ level, msg });
  const relay = createRelay({
    pool: db.pool,
    publisher,
    schema: db.schema,
    pollIntervalMs: 50,
    batchSize: 10,
    outageReminderMs: 60_000,
    logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') },
  });
  const waiting: OutboxEvent[] = [0, 1, 2].map((i) => ({
    aggregateType: 'hook',
    aggregateId: `h${i}`,
    type: 'hook.called',
    payload: { i },
  }));
  const flowing: OutboxEvent[] = Array.from({ length: 300 }, (_, i) => ({
    aggregateType: 'order',
    aggregateId: `o${i % 20}`,
    type: 'order.changed',
    topic: `partial${tag}.order`,
    payload: { i },
  }));
  try {
    await relay.start();
    await inTransaction(db.pool, (tx) => enqueue(tx, [...waiting, ...flowing], { schema: db.schema }));
    const started = Date.now();
    await waitFor(
      async () => {
        const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".events`);
        return rows[0].n === waiting.length;
      },
      { timeoutMs: 10_000, what: 'the 300 NATS events delivered while the webhook receiver is down' },
    );
    expect(Date.now() - started).toBeLessThan(5000);
    const { rows } = await db.pool.query(`SELECT status, attempts FROM "${db.schema}".events`);
    expect(rows.every((r) => r.status === 'pending' && r.attempts === 0)).toBe(true);
    // Said once, not once per batch (nor flapping with 'available again').
    expect(lines.filter((l) => l.msg.startsWith('broker unavailable'))).toHaveLength(1);
    expect(lines.filter((l) => l.msg === 'broker available again')).toHaveLength(0);

    // The receiver comes up: the waiting events go, and the outage ends, once.
    const received: string[] = [];
    const receiver = createServer((req, res) => {
      received.push(String(req.headers['txo-event-id'] ?? req.url));
      req.resume();
      req.on('end', () => res.writeHead(200).end());
    });
    await new Promise<void>((resolve) => receiver.listen(port, '127.0.0.1', resolve));
    try {
      await waitFor(
        async () => {
          const { rows: left } = await db.pool.query(`SELECT 1 FROM "${db.schema}".events`);
          return left.length === 0;
        },
        { timeoutMs: 15_000, what: 'the webhook events delivered once the receiver is up' },
      );
      expect(received.length).toBeGreaterThanOrEqual(waiting.length);
      await waitFor(async () => lines.some((l) => l.msg === 'broker available again'), {
        what: 'the recovery logged',
      });
      expect(lines.filter((l) => l.msg === 'broker available again')).toHaveLength(1);
      expect(lines.filter((l) => l.msg.startsWith('broker unavailable'))).toHaveLength(1);
    } finally {
      await relay.stop({ timeout: 2000 });
      await new Promise((resolve) => receiver.close(resolve));
    }
  } finally {
    await relay.stop({ timeout: 2000 });
  }
});
