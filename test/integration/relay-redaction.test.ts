/**
 * The relay's safety net: whatever URL a publisher (or the client library under it) puts
 * in an outcome's error, its password and query values reach neither `events.last_error`
 * nor the relay's log lines nor its stats.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PublishError } from '../../src/errors.js';
import type { Logger } from '../../src/logger.js';
import { enqueue } from '../../src/producer/enqueue.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

let db: TestDb;

beforeAll(async () => {
  db = await createTestDb('relay_redaction', { partitions: 2 });
});

afterAll(async () => {
  await db?.close();
});

describe('relay: errors are recorded and logged redacted', () => {
  it('masks a URL password and query token in last_error, the log and stats', async () => {
    const lines: string[] = [];
    const record = (obj: object, msg?: string): void => {
      lines.push(`${msg ?? ''} ${JSON.stringify(obj)}`);
    };
    const logger: Logger = { debug: record, info: record, warn: record, error: record };
    const publisher = new RecordingPublisher();
    publisher.verdict = () => ({
      ok: false,
      retryable: true,
      error: new PublishError(
        'connect failed: amqp://guest:s3cretPw@10.0.0.1:5672/vhost and https://h/hook?token=t0kenValue.',
        { retryable: true },
      ),
    });
    await inTransaction(db.pool, (tx) =>
      enqueue(
        tx,
        { aggregateType: 'order', aggregateId: 'r1', type: 'order.placed', payload: 1 },
        { schema: db.schema },
      ),
    );
    const relay = createRelay({
      pool: db.pool,
      publisher,
      schema: db.schema,
      pollIntervalMs: 50,
      maxAttempts: 2,
      backoff: { baseMs: 20, capMs: 50 },
      logger,
    });
    await relay.start();
    try {
      await waitFor(
        async () => {
          const { rows } = await db.pool.query(`SELECT status FROM "${db.schema}".events`);
          return rows[0]?.status === 'dead';
        },
        { what: 'the event to go dead' },
      );
    } finally {
      await relay.stop({ timeout: 2000 });
    }
    const { rows } = await db.pool.query(`SELECT last_error FROM "${db.schema}".events`);
    expect(rows[0].last_error).toBe(
      'connect failed: amqp://guest:***@10.0.0.1:5672/vhost and https://h/hook?token=***.',
    );
    const logged = lines.join('\n');
    expect(logged).toMatch(/event is dead/);
    for (const text of [logged, JSON.stringify(relay.stats())]) {
      expect(text).not.toMatch(/s3cretPw|t0kenValue/);
    }
  });
});
