/**
 * `/readyz` (the ReadinessMonitor behind it) for a relay whose broker was never reachable: its
 * first publish waits a whole connect timeout before the relay learns of the outage. Until
 * the broker answered, the broker check must never say "publishes get through" (issue 24,
 * item 11): a real relay on PostgreSQL, its Redis publisher pointed at a port that accepts
 * connections and never answers.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/logger.js';
import { ReadinessMonitor, type ReadinessReport } from '../../src/ops/readiness.js';
import { enqueue } from '../../src/producer/enqueue.js';
import { redisPublisher } from '../../src/publishers/redis/index.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';

let db: TestDb;
let silent: Server;
const sockets: Socket[] = [];

beforeAll(async () => {
  db = await createTestDb('readiness_broker', { partitions: 2 });
  silent = createServer((socket) => {
    sockets.push(socket);
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
});
afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await new Promise((resolve) => silent?.close(resolve));
  await db?.close();
});

describe('readiness of a relay whose broker never answered', () => {
  it('is not ready while the first publish waits for an answer, and never says publishes get through', async () => {
    const { port } = silent.address() as { port: number };
    await inTransaction(db.pool, (tx) =>
      enqueue(tx, { aggregateType: 'o', aggregateId: '1', type: 't', payload: {} }, { schema: db.schema }),
    );
    const relay = createRelay({
      pool: db.pool,
      // The default connect timeout is 10 s; longer here, so the wait outlasts the test.
      publisher: redisPublisher({ url: `redis://127.0.0.1:${port}`, timeoutMs: 60_000 }),
      schema: db.schema,
      pollIntervalMs: 50,
      leaseMs: 3000,
    });
    const monitor = new ReadinessMonitor({ pool: db.pool, relay, timeoutMs: 2000, logger: silentLogger });
    const reports: ReadinessReport[] = [];
    await relay.start();
    try {
      await waitFor(
        async () => {
          const report = await monitor.check();
          reports.push(report);
          return (
            report.checks.broker?.ok === false ||
            report.checks.broker?.detail.includes('get through') === true
          );
        },
        { what: 'the broker check failing (or saying get through)', timeoutMs: 10_000 },
      );
      // From the start, not one report said the publishes get through.
      expect(reports.map((r) => r.checks.broker?.detail).filter((d) => d?.includes('get through'))).toEqual(
        [],
      );
      const last = reports.at(-1)!;
      expect(last.ready).toBe(false);
      expect(last.failing).toEqual(['broker']);
      expect(last.checks.broker?.detail).toMatch(
        /^redis: not known yet: the first publish has had no answer since \d{4}-/,
      );
      expect(sockets.length).toBeGreaterThan(0); // the publisher did try the broker
    } finally {
      await relay.stop({ timeout: 1000 });
    }
  });
});
