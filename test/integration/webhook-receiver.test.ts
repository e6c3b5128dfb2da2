import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWebhookServer, type WebhookServer } from '../../src/consumers/webhook.js';
import { envelopeHeaders } from '../../src/envelope/bindings.js';
import { createInbox, type InboxHandler, type InboxOptions } from '../../src/inbox/inbox.js';
import type { OutboxMessage, Publisher, PublishOutcome } from '../../src/publishers/contract.js';
import { signWebhookRequest, webhookPublisher } from '../../src/publishers/webhook/index.js';
import { structuredEvent } from '../../src/publishers/webhook/request.js';
import { AWKWARD_IDS, PREVIOUS_IDS, previousEnvelopeHeaders } from '../../src/testing/envelopes.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { recordingHandler } from '../helpers/effects.js';
import { logRecorder } from '../helpers/log-recorder.js';
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

/** POSTs a request signed as webhookPublisher signs, with `headers` as the event's headers. */
async function signedPost(url: string, id: string, headers: Record<string, string>, body: Uint8Array) {
  const res = await fetch(`${url}/events`, {
    method: 'POST',
    headers: { ...headers, ...signWebhookRequest({ secret: SECRET, id, body, headers }) },
    body,
  });
  return { status: res.status, text: await res.text() };
}

describe('webhookReceiver — the envelope on the wire', () => {
  it('reads what 0.1 sent (raw ce-* values, ce-datacontenttype, a plain ce-sequence) beside the current form', async () => {
    const s = await setup({ ordering: 'strict' });
    for (const aggregateId of PREVIOUS_IDS) {
      const old = makeMessage({ aggregateId, sequence: 1, contentType: 'application/octet-stream' });
      const headers = { ...previousEnvelopeHeaders(old, 'tx-outbox'), 'content-type': old.contentType };
      expect((await signedPost(s.url, old.eventId, headers, old.payload)).status).toBe(204);
      expect(await s.post(SECRET, makeMessage({ aggregateId, sequence: 2 }))).toEqual([{ ok: true }]);
    }
    const applied = await s.applied();
    for (const id of PREVIOUS_IDS) {
      // '%41%42' and 'a%20b' stay as they are: 0.1 never encoded.
      expect(applied.filter((r) => r.aggregate_id === id).map((r) => r.sequence)).toEqual([1, 2]);
    }
  });

  it('reads the content type of each form: content-type now, ce-datacontenttype from 0.1', async () => {
    const { handler, seen } = recordingHandler();
    const server = await createWebhookServer({
      inbox: createInbox({ pool: db.pool, consumer: `ct-${db.schema}`, schema: db.schema }),
      handler: async (tx, event) => {
        await handler(tx, event);
        types.set(event.eventId, event.contentType);
      },
      secret: SECRET,
    });
    servers.push(server);
    const types = new Map<string, string | undefined>();
    const current = makeMessage({ payload: new Uint8Array([1]), contentType: 'application/octet-stream' });
    const publisher = webhookPublisher({ endpoints: `${server.url}/events`, secret: SECRET });
    publishers.push(publisher);
    expect(await publisher.publish([current], new AbortController().signal)).toEqual([{ ok: true }]);
    const old = makeMessage({ payload: new Uint8Array([2]), contentType: 'application/octet-stream' });
    // 0.1 sent content-type too; its ce-datacontenttype is the attribute.
    const headers = { ...previousEnvelopeHeaders(old, 'tx-outbox'), 'content-type': 'text/plain' };
    expect((await signedPost(server.url, old.eventId, headers, old.payload)).status).toBe(204);
    expect(types.get(current.eventId)).toBe('application/octet-stream');
    expect(types.get(old.eventId)).toBe('application/octet-stream');
    expect(seen.map((e) => e.eventId)).toEqual([current.eventId, old.eventId]);
  });

  it('a signed ce-* value that is not valid percent-encoding is a 400 naming the header, logged; nothing applied', async () => {
    const { lines, logger } = logRecorder();
    const { handler, seen } = recordingHandler();
    const server = await createWebhookServer({
      inbox: createInbox({ pool: db.pool, consumer: `pct-${db.schema}`, schema: db.schema }),
      handler,
      secret: SECRET,
      logger,
    });
    servers.push(server);
    for (const [value, why] of [
      ['50%zz', /'%' at index 2 is not followed by two hex digits/],
      ['%FF%FE', /not UTF-8/],
      ['trailing%', /'%' at index 8/],
    ] as const) {
      const m = makeMessage({ sequence: 1 });
      const headers = { ...envelopeHeaders(m, 'tx-outbox', 'http'), 'ce-aggregateid': value };
      const answer = await signedPost(server.url, m.eventId, headers, m.payload);
      expect(answer.status).toBe(400);
      expect(answer.text).toMatch(/headers\.ce-aggregateid: is not valid percent-encoding/);
      expect(answer.text).toMatch(why);
      const line = lines.find((l) => l.obj['webhookId'] === m.eventId);
      expect(line).toMatchObject({ level: 'error', msg: 'webhook rejected' });
      expect(String(line?.obj['reason'])).toContain('headers.ce-aggregateid');
    }
    expect(seen).toEqual([]);
  });
});

describe('webhookReceiver — batch mode', () => {
  it('applies every event of a batch exactly, awkward ids included; a retried batch adds nothing', async () => {
    const s = await setup();
    const messages = AWKWARD_IDS.map((aggregateId) => makeMessage({ aggregateId, sequence: 1 }));
    const batcher = webhookPublisher({
      endpoints: `${s.url}/events`,
      secret: SECRET,
      batch: { maxSize: 6 },
    });
    publishers.push(batcher);
    expect(await batcher.publish(messages, new AbortController().signal)).toEqual(
      messages.map(() => ({ ok: true })),
    );
    expect(await batcher.publish(messages, new AbortController().signal)).toEqual(
      messages.map(() => ({ ok: true })),
    );
    const applied = await s.applied();
    expect(applied.map((r) => r.event_id).sort()).toEqual(messages.map((m) => m.eventId).sort());
    for (const m of messages) {
      expect(applied.find((r) => r.event_id === m.eventId)?.aggregate_id).toBe(m.aggregateId);
    }
  });

  it('strict: a batch with a deferred event is answered 503 (the sender retries it whole), and applies in order', async () => {
    const s = await setup({ ordering: 'strict' });
    const [m1, m2, m3] = [1, 2, 3].map((sequence) => makeMessage({ aggregateId: 'bx', sequence })) as [
      OutboxMessage,
      OutboxMessage,
      OutboxMessage,
    ];
    const other = makeMessage({ aggregateId: 'by', sequence: 1 });
    const batcher = webhookPublisher({
      endpoints: `${s.url}/events`,
      secret: SECRET,
      batch: { maxSize: 10 },
    });
    publishers.push(batcher);
    const first = await batcher.publish([m1, m3, other], new AbortController().signal);
    expect(first.map((o) => o.ok)).toEqual([false, false, false]);
    expect(first[0]).toMatchObject({ retryable: true, retryAfterMs: 1000 });
    if (!first[0]!.ok) expect(first[0]!.error.message).toContain('deferred: 1 of 3 events');
    // Aggregates run side by side: their order between them is not fixed.
    expect((await s.applied()).map((r) => `${r.aggregate_id}:${r.sequence}`).sort()).toEqual([
      'bx:1',
      'by:1',
    ]);
    expect(await batcher.publish([m2, m3], new AbortController().signal)).toEqual([
      { ok: true },
      { ok: true },
    ]);
    expect((await s.applied()).filter((r) => r.aggregate_id === 'bx').map((r) => r.sequence)).toEqual([
      1, 2, 3,
    ]);
  });

  it('reads a batch as 0.1 wrote it: the same members, values as they are, a plain sequence', async () => {
    const s = await setup({ ordering: 'none' });
    const m = makeMessage({ aggregateId: 'a%20b 0.1', sequence: 7, json: { v: 1 } });
    const event: Record<string, unknown> = { traceparent: 'tp' };
    for (const [name, value] of Object.entries(previousEnvelopeHeaders(m, 'tx-outbox')))
      if (name.startsWith('ce-')) event[name.slice(3)] = value;
    event['data'] = { v: 1 };
    const body = Buffer.from(JSON.stringify([event]));
    const headers = { 'content-type': 'application/cloudevents-batch+json' };
    expect((await signedPost(s.url, `batch_${m.eventId}`, headers, body)).status).toBe(204);
    expect(await s.applied()).toEqual([{ event_id: m.eventId, aggregate_id: 'a%20b 0.1', sequence: 7 }]);
  });

  it('refuses, with a 400 naming the element and attribute, a batch with an event it cannot read', async () => {
    const s = await setup();
    const m = makeMessage({ aggregateId: 'bad-batch', sequence: 1 });
    const good = structuredEvent(m, 'tx-outbox');
    const cases: Array<[unknown, RegExp]> = [
      [[good, { ...good, id: randomUUID(), aggregateid: undefined }], /batch\[1\]\.aggregateid: is missing/],
      [[good, { ...good, id: 'not-a-uuid' }], /batch\[1\]: is not a tx-outbox event .*is not a UUID/],
      [[{ ...good, data_base64: '***' }], /batch\[0\]\.data_base64: is not base64/],
      [[good, 42], /batch\[1\]: is not a JSON object/],
      [{ events: [good] }, /batch: is not a JSON array/],
    ];
    for (const [events, why] of cases) {
      const body = Buffer.from(JSON.stringify(events));
      const headers = { 'content-type': 'application/cloudevents-batch+json' };
      const answer = await signedPost(s.url, `batch_${m.eventId}`, headers, body);
      expect(answer.status).toBe(400);
      expect(answer.text).toMatch(why);
    }
    const broken = await signedPost(
      s.url,
      `batch_${m.eventId}`,
      { 'content-type': 'application/cloudevents-batch+json' },
      Buffer.from('[{'),
    );
    expect(broken).toMatchObject({ status: 400, text: expect.stringMatching(/batch: is not UTF-8 JSON/) });
    const latin1 = await signedPost(
      s.url,
      `batch_${m.eventId}`,
      { 'content-type': 'application/cloudevents-batch+json' },
      Buffer.from('["caf\xe9"]', 'latin1'),
    );
    expect(latin1).toMatchObject({ status: 400, text: expect.stringMatching(/batch: is not UTF-8 JSON/) });
    expect(await s.applied()).toEqual([]);
  });
});
