import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { webhookPublisher } from '../../src/publishers/webhook/index.js';
import { publisherContract, type ReceivedMessage } from '../../src/testing/index.js';
import { DATABASE_URL } from '../helpers/env.js';

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const received = new Map<string, ReceivedMessage[]>();
let server: Server;
let port = 0;

// The "broker": an HTTP receiver that keeps what it was sent, per path; paths ending in -reject get a 422.
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
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers[k] = v;
      const list = received.get(path) ?? [];
      list.push({
        eventId: headers['webhook-id'] ?? '',
        aggregateId: headers['ce-aggregateid'] ?? '',
        sequence: Number(headers['ce-sequence']),
        headers,
        payload: Buffer.concat(chunks),
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
    get broker() {
      return { host: '127.0.0.1', port };
    },
    create: (address) =>
      webhookPublisher({
        endpoints: (m) => `http://${address.host}:${address.port}/${m.topic}`,
        secret: SECRET,
        timeoutMs: 3000,
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
  { relay: { databaseUrl: DATABASE_URL } },
);
