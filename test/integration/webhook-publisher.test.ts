import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { isBrokerUnavailable, OutboxError, OutboxValidationError, PublishError } from '../../src/errors.js';
import type { OutboxMessage, Publisher, PublishOutcome } from '../../src/publishers/contract.js';
import {
  signWebhook,
  verifyWebhook,
  type WebhookPublisherOptions,
  webhookPublisher,
} from '../../src/publishers/webhook/index.js';
import { makeMessage } from '../helpers/messages.js';

const SECRET = `whsec_${Buffer.from('a-32-byte-secret-for-the-tests!!').toString('base64')}`;

interface Received {
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

type Handler = (req: Received, res: ServerResponse) => void;

interface TestServer {
  readonly server: Server;
  readonly url: string;
  readonly received: Received[];
  /** Resolves when the server has received `count` requests in total. */
  waitFor(count: number): Promise<void>;
  close(): Promise<void>;
}

const cleanups: Array<() => Promise<void>> = [];

afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function startServer(handler: Handler = (_req, res) => res.writeHead(204).end()): Promise<TestServer> {
  const received: Received[] = [];
  const waiters: Array<{ count: number; resolve: () => void }> = [];
  const server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const request = {
        method: req.method!,
        path: req.url!,
        headers: req.headers,
        body: Buffer.concat(chunks),
      };
      received.push(request);
      for (const waiter of waiters.filter((w) => received.length >= w.count)) waiter.resolve();
      handler(request, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const close = async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  cleanups.push(close);
  return {
    server,
    url: `http://127.0.0.1:${port}`,
    received,
    waitFor: (count) =>
      received.length >= count
        ? Promise.resolve()
        : new Promise((resolve) => waiters.push({ count, resolve })),
    close,
  };
}

function publisher(options: Partial<WebhookPublisherOptions> & Pick<WebhookPublisherOptions, 'endpoints'>) {
  const created = webhookPublisher({ secret: SECRET, timeoutMs: 2_000, ...options });
  cleanups.push(() => created.close());
  return created;
}

function publish(
  target: Publisher,
  messages: readonly OutboxMessage[],
  signal = new AbortController().signal,
) {
  return target.publish(messages, signal);
}

function failure(outcome: PublishOutcome | undefined) {
  if (outcome === undefined || outcome.ok)
    throw new Error(`expected a failed outcome, got ${JSON.stringify(outcome)}`);
  return outcome;
}

/** Answers with the status named by the last path segment, e.g. POST /status/503. */
const statusFromPath: Handler = (req, res) => {
  const status = Number(req.path.split('/').pop());
  res.writeHead(status, { 'content-type': 'text/plain' }).end(`status ${status} body`);
};

describe('webhookPublisher — single mode', () => {
  it('POSTs the payload unchanged with CloudEvents and Standard Webhooks headers that verify', async () => {
    const server = await startServer();
    const target = publisher({ endpoints: `${server.url}/hooks`, ceSource: 'orders-service' });
    const message = makeMessage({
      json: { total: 42 },
      sequence: 3,
      schemaVersion: 2,
      headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
    });

    const outcomes = await publish(target, [message]);

    expect(outcomes).toEqual([{ ok: true }]);
    const [req] = server.received;
    expect(req?.method).toBe('POST');
    expect(req?.path).toBe('/hooks');
    expect(req?.body.equals(Buffer.from(message.payload))).toBe(true);
    expect(req?.headers).toMatchObject({
      'content-type': 'application/json',
      'ce-specversion': '1.0',
      'ce-id': message.eventId,
      'ce-type': 'order.created',
      'ce-source': 'orders-service',
      'ce-aggregatetype': 'order',
      'ce-aggregateid': message.aggregateId,
      'ce-subject': message.aggregateId,
      'ce-time': message.createdAt.toISOString(),
      'ce-sequence': '0000000000000000003',
      'ce-aggregatesequence': '3',
      'ce-schemaversion': '2',
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      'webhook-id': message.eventId,
    });
    // HTTP binding §3.1.1: the data content type is content-type, not also ce-datacontenttype.
    expect(req?.headers).not.toHaveProperty('ce-datacontenttype');
    const timestamp = Number(req?.headers['webhook-timestamp']);
    expect(Math.abs(timestamp - Date.now() / 1000)).toBeLessThan(5);
    expect(req?.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);

    expect(verifyWebhook({ secret: SECRET, headers: req!.headers, body: req!.body })).toBe(true);
    const tampered = Buffer.from(req!.body.toString('utf8').replace('42', '43'));
    expect(verifyWebhook({ secret: SECRET, headers: req!.headers, body: tampered })).toBe(false);
    expect(verifyWebhook({ secret: 'another secret', headers: req!.headers, body: req!.body })).toBe(false);
  });

  it('sends bytes payloads as application/octet-stream, untouched', async () => {
    const server = await startServer();
    const target = publisher({ endpoints: server.url, headers: { authorization: 'Bearer t0ken' } });
    const payload = new Uint8Array([0, 255, 1, 254, 10, 13]);
    const outcomes = await publish(target, [
      makeMessage({ payload, contentType: 'application/octet-stream' }),
    ]);

    expect(outcomes).toEqual([{ ok: true }]);
    const [req] = server.received;
    expect(req?.headers['content-type']).toBe('application/octet-stream');
    expect(req?.headers['authorization']).toBe('Bearer t0ken');
    expect([...req!.body]).toEqual([...payload]);
    expect(verifyWebhook({ secret: SECRET, headers: req!.headers, body: req!.body })).toBe(true);
  });

  it('maps status codes to outcomes, one per message, in order', async () => {
    const server = await startServer(statusFromPath);
    const target = publisher({ endpoints: (m) => `${server.url}/status/${m.topic}` });
    const statuses = ['200', '400', '404', '408', '429', '500', '503', '202', '301'];
    const outcomes = await publish(
      target,
      statuses.map((topic) => makeMessage({ topic })),
    );

    expect(outcomes.map((o) => (o.ok ? 'ok' : o.retryable ? 'retry' : 'permanent'))).toEqual([
      'ok',
      'permanent',
      'permanent',
      'retry',
      'retry',
      'retry',
      'retry',
      'ok',
      'permanent',
    ]);
    const notFound = failure(outcomes[2]);
    expect(notFound.error).toBeInstanceOf(PublishError);
    expect(notFound.error.message).toContain('404');
    expect(notFound.error.message).toContain(`${server.url}/status/404`);
    expect(notFound.error.message).toContain('status 404 body');
    expect(failure(outcomes[5]).error.message).toContain('500');
  });

  it('consumes response bodies so the connection is reused', async () => {
    const body = 'b'.repeat(48 * 1024); // bigger than undici's buffer: only read if the publisher drains it
    const server = await startServer((req, res) => res.writeHead(req.path === '/ok' ? 200 : 500).end(body));
    let connections = 0;
    server.server.on('connection', () => {
      connections += 1;
    });
    const target = publisher({ endpoints: { ok: `${server.url}/ok`, '*': `${server.url}/fail` } });
    for (const topic of ['ok', 'fail', 'ok', 'fail', 'ok', 'fail'])
      await publish(target, [makeMessage({ topic })]);

    expect(server.received).toHaveLength(6);
    // undici may open a second socket once (as with plain fetch + res.text()); an undrained body would cost one each.
    expect(connections).toBeLessThanOrEqual(2);
  });

  it('truncates the response body in error messages', async () => {
    const server = await startServer((_req, res) => res.writeHead(400).end('x'.repeat(5_000)));
    const target = publisher({ endpoints: server.url });
    const [outcome] = await publish(target, [makeMessage()]);

    const { error } = failure(outcome);
    expect(error.message).toContain('400');
    expect(error.message.length).toBeLessThan(400);
  });

  it('honours Retry-After in seconds and as an HTTP-date', async () => {
    const inThirtySeconds = new Date(Date.now() + 30_000).toUTCString();
    const server = await startServer((req, res) => {
      const retryAfter = req.path === '/seconds' ? '7' : inThirtySeconds;
      res.writeHead(req.path === '/seconds' ? 429 : 503, { 'retry-after': retryAfter }).end();
    });
    const target = publisher({ endpoints: { seconds: `${server.url}/seconds`, '*': `${server.url}/date` } });
    const [seconds, date] = await publish(target, [makeMessage({ topic: 'seconds' }), makeMessage()]);

    expect(failure(seconds)).toMatchObject({ retryable: true, retryAfterMs: 7_000 });
    expect(failure(seconds).error).toMatchObject({ retryAfterMs: 7_000 });
    const dateMs = failure(date).retryAfterMs!;
    expect(dateMs).toBeGreaterThan(27_000);
    expect(dateMs).toBeLessThanOrEqual(30_000);
  });

  it('a timeout while the endpoint answers nothing is BROKER_UNAVAILABLE (the link is in doubt, no attempt)', async () => {
    const server = await startServer(() => {});
    const target = publisher({ endpoints: server.url, timeoutMs: 100 });
    const started = Date.now();
    const [outcome] = await publish(target, [makeMessage()]);

    expect(failure(outcome).retryable).toBe(true);
    expect(failure(outcome).error.message).toContain('timed out after 100 ms');
    expect(failure(outcome).error.message).toContain('the connection is in doubt');
    expect(isBrokerUnavailable(failure(outcome).error)).toBe(true);
    expect(Date.now() - started).toBeLessThan(1_500);
  });

  it('a timeout while the endpoint answers other requests is retryable and charged', async () => {
    const server = await startServer((req, res) => {
      if (req.path !== '/slow') res.writeHead(204).end();
    });
    const target = publisher({
      endpoints: { slow: `${server.url}/slow`, '*': `${server.url}/fast` },
      timeoutMs: 300,
    });
    const [slow, fast] = await publish(target, [makeMessage({ topic: 'slow' }), makeMessage()]);

    expect(fast).toEqual({ ok: true });
    expect(failure(slow).retryable).toBe(true);
    expect(failure(slow).error.message).toContain('timed out after 300 ms');
    expect(isBrokerUnavailable(failure(slow).error)).toBe(false);
  });

  it('fails retryably when the connection is refused', async () => {
    const server = await startServer();
    await server.close();
    const target = publisher({ endpoints: server.url });
    const [outcome] = await publish(target, [makeMessage()]);

    expect(failure(outcome).retryable).toBe(true);
    expect(failure(outcome).error.message).toContain('ECONNREFUSED');
    // Unreachable: the relay retries without charging the event an attempt.
    expect(isBrokerUnavailable(failure(outcome).error)).toBe(true);
  });

  it("aborts in-flight requests when the caller's signal aborts", async () => {
    const server = await startServer(() => {});
    const target = publisher({ endpoints: server.url, timeoutMs: 10_000 });
    const controller = new AbortController();
    const pending = publish(target, [makeMessage()], controller.signal);
    await server.waitFor(1);
    controller.abort();

    const [outcome] = await pending;
    expect(failure(outcome).retryable).toBe(true);
    expect(failure(outcome).error.message).toContain("caller's signal");
  });

  it('never has more than `maxInFlight` requests in flight', async () => {
    let inFlight = 0;
    let peak = 0;
    const server = await startServer((_req, res) => {
      inFlight += 1;
      peak = Math.max(peak, inFlight);
      setTimeout(() => {
        inFlight -= 1;
        res.writeHead(200).end();
      }, 30);
    });
    const target = publisher({ endpoints: server.url, maxInFlight: 2 });
    const outcomes = await publish(
      target,
      Array.from({ length: 6 }, () => makeMessage()),
    );

    expect(outcomes.every((o) => o.ok)).toBe(true);
    expect(peak).toBe(2);
  });

  it("adds a bounded number of listeners to the caller's signal, however large the batch", async () => {
    const server = await startServer();
    const target = publisher({ endpoints: server.url, maxInFlight: 4 });
    const warnings: Error[] = [];
    const onWarning = (warning: Error): void => {
      warnings.push(warning);
    };
    process.on('warning', onWarning);
    try {
      const outcomes = await publish(
        target,
        Array.from({ length: 40 }, () => makeMessage()),
      );
      expect(outcomes.every((o) => o.ok)).toBe(true);
      await new Promise((resolve) => setImmediate(resolve)); // warnings are emitted on the next tick
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
  });
});

describe('webhookPublisher — routing', () => {
  it("routes by topic with a Record and falls back to '*'", async () => {
    const server = await startServer();
    const target = publisher({
      endpoints: { payments: `${server.url}/payments`, '*': `${server.url}/other` },
    });
    const outcomes = await publish(target, [
      makeMessage({ topic: 'payments' }),
      makeMessage({ topic: 'shipping' }),
      makeMessage({ topic: null }),
    ]);

    expect(outcomes).toEqual([{ ok: true }, { ok: true }, { ok: true }]);
    expect(server.received.map((r) => r.path).sort()).toEqual(['/other', '/other', '/payments']);
  });

  it('fails permanently for a topic without an endpoint and no fallback', async () => {
    const server = await startServer();
    const target = publisher({ endpoints: { payments: `${server.url}/payments` } });
    const outcomes = await publish(target, [
      makeMessage({ topic: 'shipping' }),
      makeMessage({ topic: 'payments' }),
    ]);

    const unknown = failure(outcomes[0]);
    expect(unknown.retryable).toBe(false);
    expect(unknown.error.message).toContain("topic 'shipping'");
    expect(unknown.error.message).toContain('`endpoints`');
    expect(outcomes[1]).toEqual({ ok: true });
    expect(server.received).toHaveLength(1);
  });

  it('fails permanently when the endpoints function returns garbage', async () => {
    const target = publisher({ endpoints: () => 'not a url' });
    const [outcome] = await publish(target, [makeMessage()]);

    expect(failure(outcome).retryable).toBe(false);
    expect(failure(outcome).error.message).toContain('endpoints');
  });
});

describe('webhookPublisher — batch mode', () => {
  it('POSTs a signed CloudEvents batch per URL and maps the outcome to each message', async () => {
    const server = await startServer((req, res) => res.writeHead(req.path === '/a' ? 200 : 503).end());
    const target = publisher({
      endpoints: { a: `${server.url}/a`, b: `${server.url}/b` },
      batch: { maxSize: 2 },
    });
    const bytes = new Uint8Array([1, 2, 3]);
    const messages = [
      makeMessage({ topic: 'a', json: { n: 1 } }),
      makeMessage({ topic: 'b' }),
      makeMessage({ topic: 'a', payload: bytes, contentType: 'application/octet-stream' }),
      makeMessage({ topic: 'a', json: { n: 3 }, headers: { traceparent: 'tp' } }),
    ];

    const outcomes = await publish(target, messages);

    expect(outcomes.map((o) => o.ok)).toEqual([true, false, true, true]);
    expect(failure(outcomes[1]).retryable).toBe(true);
    const toA = server.received.filter((r) => r.path === '/a');
    expect(toA).toHaveLength(2); // three messages, maxSize 2
    for (const req of server.received) {
      expect(req.headers['content-type']).toBe('application/cloudevents-batch+json');
      expect(verifyWebhook({ secret: SECRET, headers: req.headers, body: req.body })).toBe(true);
    }
    const events = toA.flatMap((r) => JSON.parse(r.body.toString('utf8')) as Array<Record<string, unknown>>);
    const byId = new Map(events.map((e) => [e['id'], e]));
    expect(byId.get(messages[0]!.eventId)).toMatchObject({
      specversion: '1.0',
      type: 'order.created',
      source: 'tx-outbox',
      aggregateid: messages[0]!.aggregateId,
      datacontenttype: 'application/json',
      data: { n: 1 },
    });
    expect(byId.get(messages[2]!.eventId)).toMatchObject({
      data_base64: Buffer.from(bytes).toString('base64'),
    });
    expect(byId.get(messages[3]!.eventId)).toMatchObject({ data: { n: 3 }, traceparent: 'tp' });
    const firstIds = toA.map((r) => r.headers['webhook-id']);
    expect(firstIds).toContain(`batch_${messages[0]!.eventId}`);
  });
});

describe('webhookPublisher — close()', () => {
  it('resolves hanging requests as retryable failures, is idempotent, and rejects later publishes', async () => {
    const server = await startServer(() => {});
    const target = webhookPublisher({ endpoints: server.url, secret: SECRET });
    const pending = publish(target, [makeMessage(), makeMessage()]);
    await server.waitFor(2);

    await Promise.all([target.close(), target.close()]);
    const outcomes = await pending;
    expect(outcomes).toHaveLength(2);
    for (const outcome of outcomes) {
      expect(failure(outcome).retryable).toBe(true);
      expect(failure(outcome).error.message).toContain('closed');
    }

    await target.close();
    const rejected = publish(target, [makeMessage()]);
    await expect(rejected).rejects.toBeInstanceOf(OutboxError);
    await expect(rejected).rejects.toMatchObject({ code: 'TXO_PUBLISHER_CLOSED' });
    await expect(rejected).rejects.toThrow(/closed/);
  });

  it('returns [] for an empty batch', async () => {
    const target = publisher({ endpoints: 'http://127.0.0.1:9/' });
    expect(await publish(target, [])).toEqual([]);
  });
});

describe('webhookPublisher — credentials in endpoint URLs', () => {
  const PASSWORD = 'p:ss@w0rd';
  const TOKEN = 't0kenValue';

  it('sends user:password as Basic authentication and shows neither it nor query values in errors', async () => {
    // The error page quotes the request, as many do.
    const server = await startServer((req, res) =>
      res.writeHead(500).end(`failed POST ${req.path} authorization=${req.headers.authorization}`),
    );
    const { port } = new URL(server.url);
    const url = `http://us%40er:${encodeURIComponent(PASSWORD)}@127.0.0.1:${port}/hook?token=${TOKEN}`;
    const basic = Buffer.from(`us@er:${PASSWORD}`).toString('base64');
    const [outcome] = await publish(publisher({ endpoints: url }), [makeMessage()]);

    const [req] = server.received;
    expect(req?.headers.authorization).toBe(`Basic ${basic}`);
    expect(req?.path).toBe(`/hook?token=${TOKEN}`);
    const message = failure(outcome).error.message;
    expect(message).toContain(`Webhook POST http://127.0.0.1:${port}/hook?token=*** answered HTTP 500`);
    for (const secret of [PASSWORD, encodeURIComponent(PASSWORD), TOKEN, basic]) {
      expect(message).not.toContain(secret);
    }
  });

  it('does not show the values of static headers (an API key, a bearer token) quoted by an error page', async () => {
    const server = await startServer((req, res) =>
      res
        .writeHead(401)
        .end(`denied: x-api-key=${req.headers['x-api-key']} authorization=${req.headers.authorization}`),
    );
    const headers = { 'x-api-key': 'k3y-static-api-key', authorization: 'Bearer b3arer-t0ken' };
    const [outcome] = await publish(publisher({ endpoints: server.url, headers }), [makeMessage()]);
    expect(server.received[0]?.headers['x-api-key']).toBe(headers['x-api-key']);
    const message = failure(outcome).error.message;
    expect(message).toContain('answered HTTP 401');
    for (const secret of ['k3y-static-api-key', 'b3arer-t0ken']) expect(message).not.toContain(secret);
  });

  it('refuses credentials in the URL together with an authorization header, without echoing them', () => {
    expect(() =>
      webhookPublisher({
        endpoints: `https://user:${TOKEN}@example.com/hooks`,
        secret: SECRET,
        headers: { Authorization: 'Bearer x' },
      }),
    ).toThrow(/^endpoints: 'https:\/\/user:\*\*\*@example\.com\/hooks' has a user name or password/);
  });

  it('does not echo the secrets of an invalid URL', () => {
    for (const endpoints of [
      `http://user:${TOKEN}@[bad/hook`,
      `ftp://user:${TOKEN}@example.com/?k=${TOKEN}`,
    ]) {
      let thrown: unknown;
      try {
        webhookPublisher({ endpoints, secret: SECRET });
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(OutboxValidationError);
      expect((thrown as Error).message).not.toContain(TOKEN);
    }
  });
});

describe('webhookPublisher — option validation', () => {
  const valid = { endpoints: 'https://example.com/hooks', secret: SECRET };
  const cases: Array<[string, Record<string, unknown>]> = [
    ['endpoints', { endpoints: 'not a url' }],
    ['endpoints', { endpoints: 'ftp://example.com' }],
    ['endpoints', { endpoints: undefined }],
    ["endpoints['orders']", { endpoints: { orders: '::nope' } }],
    ['secret', { secret: undefined }],
    ['secret', { secret: '' }],
    ['secret', { secret: 'whsec_***' }],
    ['timeoutMs', { timeoutMs: -1 }],
    ['maxInFlight', { maxInFlight: 0 }],
    ['batch.maxSize', { batch: { maxSize: 0 } }],
    ['headers.x-bad', { headers: { 'x-bad': 'line\nbreak' } }],
    ['ceSource', { ceSource: '' }],
  ];

  it.each(cases)('names %s in the error', (field, override) => {
    const options = { ...valid, ...override } as unknown as WebhookPublisherOptions;
    let thrown: unknown;
    try {
      webhookPublisher(options);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(OutboxValidationError);
    expect((thrown as OutboxValidationError).field).toBe(field);
    expect((thrown as Error).message.startsWith(`${field}:`)).toBe(true);
    expect((thrown as Error).message).toMatch(/Pass|omit|Call|Map/);
  });
});

describe('signWebhook / verifyWebhook', () => {
  const body = '{"hello":"world"}';
  const id = 'msg_1';
  const now = new Date('2030-01-01T00:00:00Z');
  const timestamp = Math.floor(now.getTime() / 1000);

  it('matches the Standard Webhooks test vector', () => {
    const signature = signWebhook({
      secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
      id: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
      timestamp: 1614265330,
      body: '{"test": 2432232314}',
    });
    expect(signature).toBe('v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=');
  });

  it('accepts any of several signatures and raw string or Buffer secrets', () => {
    for (const secret of ['raw secret', Buffer.from('raw bytes')]) {
      const good = signWebhook({ secret, id, timestamp, body });
      const headers = {
        'Webhook-Id': id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': `v1,bm90IGl0 ${good}`,
      };
      expect(verifyWebhook({ secret, headers, body, now })).toBe(true);
      expect(verifyWebhook({ secret, headers: new Headers(headers), body: Buffer.from(body), now })).toBe(
        true,
      );
    }
  });

  it('rejects stale or future timestamps, missing headers and other schemes', () => {
    const signature = signWebhook({ secret: SECRET, id, timestamp, body });
    const headers = {
      'webhook-id': id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': signature,
    };
    const later = (seconds: number) => new Date(now.getTime() + seconds * 1000);

    expect(verifyWebhook({ secret: SECRET, headers, body, now: later(299) })).toBe(true);
    expect(verifyWebhook({ secret: SECRET, headers, body, now: later(301) })).toBe(false);
    expect(verifyWebhook({ secret: SECRET, headers, body, now: later(-301) })).toBe(false);
    expect(verifyWebhook({ secret: SECRET, headers, body, now: later(600), toleranceSeconds: 900 })).toBe(
      true,
    );
    expect(verifyWebhook({ secret: SECRET, headers: { ...headers, 'webhook-id': 'other' }, body, now })).toBe(
      false,
    );
    expect(verifyWebhook({ secret: SECRET, headers: { 'webhook-id': id }, body, now })).toBe(false);
    const v2 = { ...headers, 'webhook-signature': signature.replace('v1,', 'v2,') };
    expect(verifyWebhook({ secret: SECRET, headers: v2, body, now })).toBe(false);
  });

  it('throws a validation error for a missing secret', () => {
    expect(() => verifyWebhook({ secret: '', headers: {}, body })).toThrow(OutboxValidationError);
  });
});
