/**
 * A consumer killed (kill -9) after the inbox commit but before the broker ack: the
 * broker redelivers, and the redelivery is a no-op (duplicate), on real NATS and PostgreSQL.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeNats } from '../../src/consumers/nats.js';
import { createInbox } from '../../src/inbox/inbox.js';
import { natsPublisher } from '../../src/publishers/nats.js';
import { contractMessage } from '../../src/testing/publisher-contract.js';
import { createTestDb, type TestDb, waitFor } from '../helpers/db.js';
import { DATABASE_URL, NATS_URL } from '../helpers/env.js';
import { deleteStream } from '../helpers/nats-stream.js';
import { exited } from '../helpers/processes.js';

const FIXTURE = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'consumer-process.mjs');
const tag = randomBytes(4).toString('hex');
const stream = `TXO_CRASH_${tag}`;
let db: TestDb;

beforeAll(async () => {
  db = await createTestDb('consumer_crash');
  await db.pool.query(`CREATE TABLE "${db.schema}".effects (event_id uuid)`);
});
afterAll(async () => {
  await deleteStream(NATS_URL, stream);
  await db?.close();
});

describe('failure: consumer killed after the inbox commit, before the ack', () => {
  it('the redelivery is a no-op: one effect, reported as duplicate', async () => {
    const publisher = natsPublisher({ servers: NATS_URL, stream, streamSubjects: [`crash${tag}.>`] });
    const message = contractMessage(`crash${tag}.events`, 'a1', 1);
    expect(await publisher.publish([message], new AbortController().signal)).toEqual([{ ok: true }]);
    await publisher.close();

    const config = {
      databaseUrl: DATABASE_URL,
      schema: db.schema,
      servers: NATS_URL,
      stream,
      durable: 'crashy',
      consumer: 'inventory',
    };
    const child = spawn(process.execPath, [FIXTURE], {
      env: { ...process.env, TXO_FIXTURE: JSON.stringify(config) },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
    });
    await exited(child);
    expect(child.signalCode).toBe('SIGKILL');
    expect(out).toMatch(/"status":"processed"/);
    const count = async () =>
      (await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".effects`)).rows[0].n as number;
    expect(await count()).toBe(1);

    // The same durable consumer, restarted: JetStream redelivers the unacked message.
    const inbox = createInbox({ pool: db.pool, consumer: 'inventory', schema: db.schema });
    const statuses: string[] = [];
    const watching = {
      consumer: inbox.consumer,
      replayReleased: inbox.replayReleased.bind(inbox),
      async handle(...args: Parameters<typeof inbox.handle>) {
        const r = await inbox.handle(...args);
        statuses.push(r.status);
        return r;
      },
    };
    const consumer = await consumeNats({
      inbox: watching as typeof inbox,
      servers: NATS_URL,
      stream,
      durable: 'crashy',
      ackWaitMs: 1000,
      handler: (tx, event) =>
        tx.query(`INSERT INTO "${db.schema}".effects (event_id) VALUES ($1)`, [event.eventId]),
    });
    try {
      await waitFor(() => statuses.length > 0, { timeoutMs: 15_000, what: 'the redelivery' });
      expect(statuses[0]).toBe('duplicate');
      expect(await count()).toBe(1);
    } finally {
      await consumer.stop();
    }
  });
});
