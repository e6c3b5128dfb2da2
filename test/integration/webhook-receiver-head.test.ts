/**
 * createWebhookServer reads a request head up to 32 KiB, twice Node's default: what `enqueue`
 * accepts fits 16 KiB already, the rest is room for what a proxy on the way adds.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWebhookServer, type WebhookServer } from '../../src/consumers/webhook.js';
import { createInbox } from '../../src/inbox/inbox.js';
import { createTestDb, type TestDb } from '../helpers/db.js';

let db: TestDb;
let server: WebhookServer;
beforeAll(async () => {
  db = await createTestDb('webhook_receiver_head');
  server = await createWebhookServer({
    inbox: createInbox({ pool: db.pool, consumer: 'head', schema: db.schema }),
    handler: async () => {},
    secret: 'a-test-secret',
  });
});
afterAll(async () => {
  await server?.close();
  await db?.close();
});

const post = (headerBytes: number) =>
  fetch(`${server.url}/events`, {
    method: 'POST',
    headers: { 'x-pad': 'p'.repeat(headerBytes), 'content-type': 'application/json' },
    body: '{}',
  });

describe('the request head the webhook receiver reads', () => {
  it('over 16 KiB is read (an unsigned request: 401), not refused with 431', async () => {
    const response = await post(24 * 1024);
    expect(response.status).toBe(401);
  });

  it('over 32 KiB is refused with 431', async () => {
    const response = await post(33 * 1024);
    expect(response.status).toBe(431);
  });
});
