/**
 * The webhook receiver under the consumer contract. A webhook has no broker: the sender is
 * the relay, so this file plays it — per publish() call, in waves of at most one event per
 * aggregate (as the relay's ordering gate does), each POSTed to one of the running receiver
 * instances in turn, and anything not answered 2xx (503 on a deferral, or no receiver running)
 * sent again after a pause, until delivered. With `previous` the POSTs are the ones
 * tx-outbox 0.1's webhookPublisher made: its `ce-*` envelope as it is (raw values,
 * `ce-datacontenttype`, a plain `ce-sequence`) next to `content-type`, every one of those
 * headers signed by the same (unchanged) txo-signature scheme.
 */
import { randomUUID } from 'node:crypto';
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWebhookServer } from '../../src/consumers/webhook.js';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';
import { signWebhookRequest, webhookPublisher } from '../../src/publishers/webhook/index.js';
import { consumerContract, previousEnvelopeHeaders } from '../../src/testing/index.js';
import { DATABASE_URL } from '../helpers/env.js';

const SECRET = `whsec_${Buffer.from('a-32-byte-secret-for-the-tests!!').toString('base64')}`;
const RETRY_MS = 150;

/** The receivers running per namespace and the sends not yet delivered. */
const running = new Map<string, Set<string>>();
const unsent = new Map<string, number>();
let turn = 0;
let closed = false;
let publisher: Publisher;

function pick(ns: string): string | undefined {
  const urls = [...(running.get(ns) ?? [])];
  if (urls.length === 0) return undefined;
  turn += 1;
  return urls[turn % urls.length];
}

/** POSTs `messages` to their receiver (each message's topic is the receiver's URL): an outcome each, ok when answered 2xx. */
type Post = (messages: readonly OutboxMessage[]) => Promise<ReadonlyArray<{ readonly ok: boolean }>>;

/** Delivers the messages in waves (one per aggregate at a time), retrying what failed. */
async function send(ns: string, messages: readonly OutboxMessage[], post: Post): Promise<void> {
  const queue = [...messages];
  while (queue.length > 0 && !closed) {
    const wave: OutboxMessage[] = [];
    const seen = new Set<string>();
    for (const m of queue) if (!seen.has(m.aggregateId) && seen.add(m.aggregateId)) wave.push(m);
    const targets = new Map(wave.map((m) => [m, pick(ns)]));
    const sendable = wave.filter((m) => targets.get(m) !== undefined);
    const outcomes = sendable.length
      ? await post(sendable.map((m) => ({ ...m, topic: targets.get(m) ?? null })))
      : [];
    let delivered = 0;
    sendable.forEach((m, i) => {
      if (outcomes[i]?.ok) {
        queue.splice(queue.indexOf(m), 1);
        delivered += 1;
      }
    });
    unsent.set(ns, (unsent.get(ns) ?? 0) - delivered);
    if (delivered < wave.length) await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
  }
}

const current: Post = (messages) => publisher.publish(messages, new AbortController().signal);

/** As 0.1's webhookPublisher sent each message (single mode); a refused connection is a failure to retry. */
const previous: Post = (messages) =>
  Promise.all(
    messages.map(async (m) => {
      const headers = { ...previousEnvelopeHeaders(m, 'contract'), 'content-type': m.contentType };
      const signature = signWebhookRequest({ secret: SECRET, id: m.eventId, body: m.payload, headers });
      try {
        const res = await fetch(`${m.topic}/events`, {
          method: 'POST',
          headers: { ...headers, ...signature },
          body: m.payload,
          signal: AbortSignal.timeout(5000),
        });
        await res.arrayBuffer();
        return { ok: res.ok };
      } catch {
        return { ok: false };
      }
    }),
  );

beforeAll(() => {
  // The message's topic carries the chosen receiver's URL.
  publisher = webhookPublisher({ endpoints: (m) => `${m.topic}/events`, secret: SECRET, timeoutMs: 5000 });
});
afterAll(async () => {
  closed = true;
  await publisher?.close();
});

consumerContract(
  { describe, it, expect, beforeAll, afterAll },
  {
    name: 'webhook',
    databaseUrl: DATABASE_URL,
    async publish(ns, messages, options) {
      unsent.set(ns, (unsent.get(ns) ?? 0) + messages.length);
      void send(ns, messages, options?.previous ? previous : current);
    },
    async publishForeign(ns) {
      // Signed, but without the ce-* envelope: refused with 400, and not sent again.
      const url = pick(ns);
      if (!url) throw new Error('no receiver running');
      const id = randomUUID();
      const body = '{}';
      const headers = { 'content-type': 'application/json' };
      const res = await fetch(`${url}/events`, {
        method: 'POST',
        headers: { ...headers, ...signWebhookRequest({ secret: SECRET, id, body, headers }) },
        body,
      });
      expect(res.status).toBe(400);
    },
    envelope: {
      binding: 'http',
      async publish(ns, m, pairs) {
        // Signed by a sender holding the secret. A name given twice goes as two header lines;
        // the signature covers the value the receiver's node:http joins them to ("a, b").
        const url = pick(ns);
        if (!url) throw new Error('no receiver running');
        const signature = signWebhookRequest({
          secret: SECRET,
          id: m.eventId,
          body: m.payload,
          headers: new Headers(pairs.map(([name, value]) => [name, value])),
        });
        const lines = new Map<string, string[]>();
        for (const [name, value] of [...pairs, ...Object.entries(signature)])
          lines.set(name, [...(lines.get(name) ?? []), value]);
        await new Promise<void>((resolve, reject) => {
          const req = request(`${url}/events`, { method: 'POST' }, (res) => {
            res.resume();
            res.on('end', () => resolve());
          });
          req.on('error', reject);
          for (const [name, values] of lines) req.setHeader(name, values.length === 1 ? values[0]! : values);
          req.end(Buffer.from(m.payload));
        });
      },
    },
    async consume(ns, setup) {
      const server = await createWebhookServer({
        inbox: setup.inbox,
        handler: setup.handler,
        logger: setup.logger,
        secret: SECRET,
        concurrency: setup.concurrency,
        retryAfterSeconds: 0,
      });
      const urls = running.get(ns) ?? new Set<string>();
      running.set(ns, urls);
      urls.add(server.url);
      const stop = () => {
        urls.delete(server.url);
        return server.close();
      };
      setup.signal?.addEventListener('abort', () => void stop(), { once: true });
      return { stop };
    },
    settled: async (ns) => (unsent.get(ns) ?? 0) === 0,
  },
);
