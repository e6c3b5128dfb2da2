import { createServer, type Server } from 'node:http';
import { HTTP } from 'cloudevents';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { percentDecode } from '../../src/envelope/percent.js';
import { verifyWebhookEvent, webhookPublisher } from '../../src/publishers/webhook/index.js';
import { publisherContract, type ReceivedMessage } from '../../src/testing/index.js';
import { CONTRACT_RELAY_EVENTS, DATABASE_URL } from '../helpers/env.js';

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const received = new Map<string, ReceivedMessage[]>();
let server: Server;
let port = 0;

/**
 * The event as the official SDK reads it. `HTTP.toEvent` maps `ce-*` headers to attributes
 * but never undoes the binding's percent-encoding (HTTP binding §3.1.3.2; cloudevents@10
 * leaves that to the application), so each string attribute it took from a `ce-` header is
 * decoded here, as a receiver must. `datacontenttype` comes from `content-type`, which is
 * not encoded, and `data` from the body.
 */
function cloudEventOf(headers: Record<string, string>, body: Buffer): Record<string, unknown> {
  const event = HTTP.toEvent({ headers, body: body.toString('utf8') });
  if (Array.isArray(event)) throw new Error('expected one event in binary mode, got a batch');
  const attributes: Record<string, unknown> = { ...event };
  for (const name in attributes) {
    const value = attributes[name];
    if (typeof value === 'string' && headers[`ce-${name}`] !== undefined)
      attributes[name] = percentDecode(value);
  }
  return attributes;
}

// The "broker": an HTTP receiver that checks every signature (401 otherwise: the publisher's
// outcome would be permanent) and keeps what it was sent, per path; paths ending in -reject get a 422.
beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const path = (req.url ?? '/').slice(1);
      if (path.endsWith('-reject')) {
        res.writeHead(422).end('unprocessable');
        return;
      }
      const body = Buffer.concat(chunks);
      const verdict = verifyWebhookEvent({ secret: SECRET, headers: req.headers, body });
      if (!verdict.ok) {
        res.writeHead(401).end(verdict.reason);
        return;
      }
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers[k] = v;
      const list = received.get(path) ?? [];
      list.push({
        eventId: headers['webhook-id'] ?? '',
        aggregateId: percentDecode(headers['ce-aggregateid'] ?? ''),
        sequence: Number(headers['ce-aggregatesequence']),
        headers,
        payload: body,
        cloudEvent: cloudEventOf(headers, body),
      });
      received.set(path, list);
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const a = server.address();
  port = typeof a === 'object' && a ? a.port : 0;
});
afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

publisherContract(
  { describe, it, expect, beforeAll, afterAll },
  {
    name: 'webhook',
    features: { orderedPerKey: true, brokerDedup: false, persistent: false },
    cloudEvents: true,
    get broker() {
      return { host: '127.0.0.1', port };
    },
    create: (address, _ns, options) =>
      webhookPublisher({
        endpoints: (m) => `http://${address.host}:${address.port}/${m.topic}`,
        secret: SECRET,
        timeoutMs: 3000,
        ceSource: options?.ceSource,
      }),
    topic: (ns) => ns,
    read: async (ns, expected) => {
      const deadline = Date.now() + 5000;
      while ((received.get(ns)?.length ?? 0) < expected && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
      }
      return received.get(ns) ?? [];
    },
    poison: (ns, m) => ({ ...m, topic: `${ns}-reject` }),
  },
  { relay: { databaseUrl: DATABASE_URL, events: CONTRACT_RELAY_EVENTS } },
);
