import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWebhookServer, type WebhookServer } from '../../src/consumers/webhook.js';
import { createInbox, type InboxHandler, type InboxOptions } from '../../src/inbox/inbox.js';
import type { OutboxMessage, Publisher, PublishOutcome } from '../../src/publishers/contract.js';
import { webhookPublisher } from '../../src/publishers/webhook/index.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { makeMessage } from '../helpers/messages.js';

const SECRET = `whsec_${Buffer.from('a-32-byte-secret-for-the-tests!!').toString('base64')}`;
const OTHER_SECRET = `whsec_${Buffer.from('another-secret-nobody-shares-!!!').toString('base64')}`;

let db: TestDb;
const servers: WebhookServer[] = [];
const publishers: Publisher[] = [];
let counter = 0;

beforeAll(async () => {
  db = await createTestDb('webhook_receiver');
  await db.pool.query(
    `CREATE TABLE "${db.schema}".effects (n bigserial, consumer text, event_id uuid, aggregate_id text, sequence int)`,
  );
});

afterAll(async () => {
  await Promise.all(publishers.map((p) => p.close()));
  await Promise.all(servers.map((s) => s.close()));
  await db?.close();
});

interface Setup {
  readonly consumerName: string;
  readonly url: string;
  readonly post: (secret: string, ...messages: OutboxMessage[]) => Promise<PublishOutcome[]>;
  readonly applied: () => Promise<Array<{ event_id: string; aggregate_id: string; sequence: number }>>;
}

async function setup(inbox: Partial<InboxOptions> = {}): Promise<Setup> {
  counter += 1;
  const consumerName = `webhook-${counter}-${db.schema}`;
  const handler: InboxHandler = async (tx, event) => {
    await tx.query(
      `INSERT INTO "${db.schema}".effects (consumer, event_id, aggregate_id, sequence) VALUES ($1, $2, $3, $4)`,
      [consumerName, event.eventId, event.aggregateId, event.sequence],
    );
  };
  const server = await createWebhookServer({
    inbox: createInbox({ pool: db.pool, consumer: consumerName, schema: db.schema, ...inbox }),
    handler,
    secret: SECRET,
    port: 0,
  });
  servers.push(server);
  const bySecret = new Map<string, Publisher>();
  return {
    consumerName,
    url: server.url,
    async post(secret, ...messages) {
      let publisher = bySecret.get(secret);
      if (!publisher) {
        publisher = webhookPublisher({ endpoints: `${server.url}/events`, secret, timeoutMs: 5000 });
        publishers.push(publisher);
        bySecret.set(secret, publisher);
      }
      return publisher.publish(messages, new AbortController().signal);
    },
    async applied() {
      const { rows } = await db.pool.query(
        `SELECT event_id, aggregate_id, sequence FROM "${db.schema}".effects WHERE consumer = $1 ORDER BY n`,
        [consumerName],
      );
      return rows;
    },
  };
}

describe('webhookReceiver', () => {
  it('applies an event exactly once when it is POSTed twice (both answered 2xx)', async () => {
    const s = await setup();
    const once = makeMessage({ aggregateId: 'a', sequence: 1 });
    const other = makeMessage({ aggregateId: 'b', sequence: 1 });
    expect((await s.post(SECRET, once, other)).every((o) => o.ok)).toBe(true);
    expect(await s.post(SECRET, once)).toEqual([{ ok: true }]);
    // Concurrent duplicates too.
    const again = await Promise.all([s.post(SECRET, once), s.post(SECRET, once)]);
    expect(again.flat().every((o) => o.ok)).toBe(true);
    const applied = await s.applied();
    expect(applied.map((r) => r.event_id).sort()).toEqual([once.eventId, other.eventId].sort());
  });

  it('answers 401 to a bad signature, which the publisher reports as permanent; nothing applied', async () => {
    const s = await setup();
    const m = makeMessage({ aggregateId: 'sig', sequence: 1 });
    const [outcome] = await s.post(OTHER_SECRET, m);
    expect(outcome?.ok).toBe(false);
    if (outcome?.ok === false) {
      expect(outcome.retryable).toBe(false);
      expect(outcome.error.message).toMatch(/401/);
    }
    // Unsigned and tampered requests too.
    const unsigned = await fetch(`${s.url}/events`, { method: 'POST', body: '{}' });
    expect(unsigned.status).toBe(401);
    expect(await s.applied()).toEqual([]);
  });

  it('answers 400 to a signed request without an envelope', async () => {
    const s = await setup();
    const { signWebhookRequest } = await import('../../src/publishers/webhook/index.js');
    const body = '{}';
    const headers = { 'content-type': 'application/json' };
    const res = await fetch(`${s.url}/events`, {
      method: 'POST',
      body,
      headers: {
        ...headers,
        ...signWebhookRequest({ secret: SECRET, id: 'msg_no_envelope', body, headers }),
      },
    });
    expect(res.status).toBe(400);
    expect(await res.text()).toMatch(/ce-id/);
  });

  it('strict: an out-of-order event is deferred (retryable, retryAfterMs) and applied once its predecessor came', async () => {
    const s = await setup({ ordering: 'strict' });
    const [m1, m2, m3] = [1, 2, 3].map((sequence) => makeMessage({ aggregateId: 'x', sequence })) as [
      OutboxMessage,
      OutboxMessage,
      OutboxMessage,
    ];
    expect(await s.post(SECRET, m1)).toEqual([{ ok: true }]);
    const [deferred] = await s.post(SECRET, m3);
    expect(deferred?.ok).toBe(false);
    if (deferred?.ok === false) {
      expect(deferred.retryable).toBe(true);
      expect(deferred.retryAfterMs).toBe(1000);
    }
    expect((await s.applied()).map((r) => r.sequence)).toEqual([1]);
    expect(await s.post(SECRET, m2)).toEqual([{ ok: true }]);
    expect(await s.post(SECRET, m3)).toEqual([{ ok: true }]); // the sender's retry
    expect((await s.applied()).map((r) => r.sequence)).toEqual([1, 2, 3]);
  });

  it('quarantines an unaccepted schema version and answers 204', async () => {
    const s = await setup({ accepts: [{ type: 'order.created', schemaVersion: 1 }] });
    const v2 = makeMessage({ aggregateId: 'q', sequence: 1, schemaVersion: 2 });
    const ok = makeMessage({ aggregateId: 'r', sequence: 1 });
    expect(await s.post(SECRET, v2, ok)).toEqual([{ ok: true }, { ok: true }]);
    const { rows } = await db.pool.query(
      `SELECT event_id, reason FROM "${db.schema}".inbox_quarantine WHERE consumer = $1`,
      [s.consumerName],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].event_id).toBe(v2.eventId);
    expect(rows[0].reason).toMatch(/schema version 2/);
    expect((await s.applied()).map((r) => r.event_id)).toEqual([ok.eventId]);
  });
});
