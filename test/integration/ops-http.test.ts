import { connect, createServer, type Server, type Socket } from 'node:net';
import pg from 'pg';
import { Gauge, Registry } from 'prom-client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { brokerUnavailable, OutboxValidationError } from '../../src/errors.js';
import { type MetricsServer, serveMetrics } from '../../src/ops/http.js';
import type { HealthSource } from '../../src/ops/readiness.js';
import { enqueue } from '../../src/producer/enqueue.js';
import { natsPublisher } from '../../src/publishers/nats/index.js';
import { createRelay, type Relay } from '../../src/relay/polling/relay.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { logRecorder } from '../helpers/log-recorder.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';
import { PrivateNats } from '../helpers/processes.js';

let db: TestDb;
const relays: Relay[] = [];
const servers: MetricsServer[] = [];
const pools: pg.Pool[] = [];

beforeAll(async () => {
  db = await createTestDb('ops_http', { partitions: 4 });
});
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
  await Promise.all(relays.splice(0).map((r) => r.stop({ timeout: 2000 })));
  await Promise.all(pools.splice(0).map((p) => p.end()));
  await db.pool.query(`DELETE FROM "${db.schema}".events`);
  await db.pool.query(`UPDATE "${db.schema}".partitions SET owner = NULL, lease_until = '-infinity'`);
});
afterAll(async () => {
  await db?.close();
});

function relay(publisher: RecordingPublisher, extra: Partial<Parameters<typeof createRelay>[0]> = {}): Relay {
  const r = createRelay({
    pool: db.pool,
    publisher,
    schema: db.schema,
    pollIntervalMs: 50,
    leaseMs: 3000,
    ...extra,
  });
  relays.push(r);
  return r;
}

async function serve(options: Partial<Parameters<typeof serveMetrics>[0]>): Promise<MetricsServer> {
  const server = await serveMetrics({ pool: db.pool, port: 0, checkIntervalMs: 100, ...options });
  servers.push(server);
  return server;
}

interface Answer {
  readonly status: number;
  readonly type: string | null;
  readonly body: string;
}

async function get(server: MetricsServer, path: string, method = 'GET'): Promise<Answer> {
  const response = await fetch(`${server.url}${path}`, { method });
  return { status: response.status, type: response.headers.get('content-type'), body: await response.text() };
}

interface ReadyBody {
  status: string;
  failing: string[];
  checks: Record<string, { ok: boolean; detail: string }>;
}

async function readyz(server: MetricsServer): Promise<{ status: number; body: ReadyBody }> {
  const answer = await get(server, '/readyz');
  return { status: answer.status, body: JSON.parse(answer.body) as ReadyBody };
}

async function waitReady(server: MetricsServer, status: number, what: string): Promise<ReadyBody> {
  let last: { status: number; body: ReadyBody } | undefined;
  await waitFor(
    async () => {
      last = await readyz(server);
      return last.status === status && last.body.status !== 'starting';
    },
    { what },
  );
  return last!.body;
}

/** A health source standing for a running relay that holds no partition (a standby). */
function standby(publisher = 'recording'): HealthSource {
  return {
    health: () => ({
      relayId: `standby-${publisher}`,
      schema: db.schema,
      publisher,
      running: true,
      partitions: 0,
      brokerUnavailableSince: undefined,
      lastError: undefined,
      loopErrorsInARow: 0,
    }),
  };
}

describe('serveMetrics', () => {
  it('serves the registry at /metrics in its content type, and /healthz', async () => {
    const registry = new Registry();
    const server = await serve({ registry });
    expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const metrics = await get(server, '/metrics');
    expect(metrics.status).toBe(200);
    expect(metrics.type).toBe(registry.contentType);
    const health = await get(server, '/healthz');
    expect(health).toMatchObject({ status: 200, body: 'ok\n' });
    expect((await get(server, '/nope')).status).toBe(404);
    expect((await get(server, '/metrics', 'POST')).status).toBe(405);
    const head = await get(server, '/healthz', 'HEAD');
    expect(head).toMatchObject({ status: 200, body: '' });
  });

  it('answers 404 at /metrics without a registry', async () => {
    const server = await serve({});
    expect((await get(server, '/metrics')).status).toBe(404);
  });

  it('is ready once the relay holds partitions, and sets tx_outbox_relay_ready to 1', async () => {
    const registry = new Registry();
    const r = relay(new RecordingPublisher());
    const server = await serve({ registry, relay: r });
    await r.start();
    const body = await waitReady(server, 200, 'ready');
    expect(body.status).toBe('ready');
    expect(Object.keys(body.checks)).toEqual(['database', 'relay', 'broker', 'partitions']);
    expect(body.checks['partitions']?.detail).toMatch(/^holds \d of 4 partitions$/);
    const metrics = await get(server, '/metrics');
    expect(metrics.body).toContain(`tx_outbox_relay_ready{schema="${db.schema}",publisher="recording"} 1`);
  });

  it('is not ready while the broker refuses publishes, and ready again after', async () => {
    const registry = new Registry();
    const publisher = new RecordingPublisher();
    let down = true;
    publisher.verdict = () =>
      down ? { ok: false, retryable: true, error: brokerUnavailable('connection refused') } : { ok: true };
    const r = relay(publisher);
    const server = await serve({ registry, relay: r });
    await r.start();
    await waitReady(server, 200, 'ready before the outage');
    await inTransaction(db.pool, (tx) =>
      enqueue(tx, { aggregateType: 'o', aggregateId: '1', type: 't', payload: {} }, { schema: db.schema }),
    );
    const body = await waitReady(server, 503, 'not ready: broker');
    expect(body.status).toBe('not ready');
    expect(body.failing).toEqual(['broker']);
    expect(body.checks['broker']?.detail).toMatch(/^recording: unreachable since \d{4}-/);
    expect((await get(server, '/metrics')).body).toContain(
      `tx_outbox_relay_ready{schema="${db.schema}",publisher="recording"} 0`,
    );
    down = false;
    await waitReady(server, 200, 'ready after the outage');
  });

  it('a real NATS server going down turns /readyz 503 naming the broker, and its return 200', async () => {
    const nats = await PrivateNats.start();
    try {
      const publisher = await natsPublisher({ url: nats.url, stream: 'OPS_HTTP', streamSubjects: ['ops.>'] });
      const registry = new Registry();
      const r = createRelay({
        pool: db.pool,
        publisher,
        schema: db.schema,
        pollIntervalMs: 50,
        metrics: registry,
      });
      relays.push(r);
      const server = await serve({ registry, relay: r });
      await r.start();
      await waitReady(server, 200, 'ready with NATS up');
      await nats.down();
      await inTransaction(db.pool, (tx) =>
        enqueue(
          tx,
          { aggregateType: 'o', aggregateId: 'n1', type: 't', topic: 'ops.x', payload: {} },
          { schema: db.schema },
        ),
      );
      // 503 from the first publish left unanswered ("not known yet"), then the outage itself.
      const waiting = await waitReady(server, 503, 'not ready: NATS down');
      expect(waiting.failing).toEqual(['broker']);
      expect(waiting.checks['broker']?.detail).toMatch(
        /^nats: (not known yet: the first publish|unreachable since )/,
      );
      let down = waiting;
      await waitFor(
        async () => {
          down = (await readyz(server)).body;
          return /^nats: unreachable since /.test(down.checks['broker']?.detail ?? '');
        },
        { what: 'the outage named' },
      );
      expect(down.failing).toEqual(['broker']);
      const metrics = (await get(server, '/metrics')).body;
      expect(metrics).toContain(`tx_outbox_relay_ready{schema="${db.schema}",publisher="nats"} 0`);
      expect(metrics).not.toContain(
        `tx_outbox_events_unavailable_total{schema="${db.schema}",publisher="nats"} 0`,
      );
      await nats.up();
      await waitReady(server, 200, 'ready with NATS back');
      await r.stop({ timeout: 2000 });
    } finally {
      await nats.destroy();
    }
  });

  it('a standby is ready when every partition has a live owner, not when one has none', async () => {
    const server = await serve({ relay: standby() });
    const unowned = await waitReady(server, 503, 'not ready: unowned partitions');
    expect(unowned.failing).toEqual(['partitions']);
    expect(unowned.checks['partitions']?.detail).toBe('holds no partition while 4 of 4 have no live owner');
    await db.pool.query(
      `UPDATE "${db.schema}".partitions SET owner = 'other', lease_until = now() + interval '1 hour'`,
    );
    const owned = await waitReady(server, 200, 'ready standby');
    expect(owned.checks['partitions']?.detail).toBe(
      'live standby: all 4 partitions are owned by live relays',
    );
    // An expired lease is no live owner.
    await db.pool.query(
      `UPDATE "${db.schema}".partitions SET lease_until = now() - interval '1 second' WHERE partition = 0`,
    );
    expect((await waitReady(server, 503, 'expired lease')).checks['partitions']?.detail).toBe(
      'holds no partition while 1 of 4 have no live owner',
    );
  });

  it('two servers on one registry share the tx_outbox_relay_ready gauge, a series each', async () => {
    const registry = new Registry();
    await db.pool.query(
      `UPDATE "${db.schema}".partitions SET owner = 'other', lease_until = now() + interval '1 hour'`,
    );
    const a = await serve({ registry, relay: standby('nats') });
    await serve({ registry, relay: standby('kafka') });
    await waitReady(a, 200, 'ready standby');
    await waitFor(async () => (await get(a, '/metrics')).body.includes('publisher="kafka"} 1'), {
      what: 'both series at 1',
    });
    const body = (await get(a, '/metrics')).body;
    expect(body).toContain(`tx_outbox_relay_ready{schema="${db.schema}",publisher="nats"} 1`);
    expect(body.match(/# TYPE tx_outbox_relay_ready gauge/g)).toHaveLength(1);
  });

  it('is not ready once the relay is stopped', async () => {
    const r = relay(new RecordingPublisher());
    const server = await serve({ relay: r });
    await r.start();
    await waitReady(server, 200, 'ready');
    await r.stop({ timeout: 2000 });
    const body = await waitReady(server, 503, 'stopped');
    expect(body.failing).toContain('relay');
    expect(body.checks['relay']?.detail).toBe('not running (not started, or stopped)');
  });

  it('reports an unreachable database, naming it, without crashing', async () => {
    const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/test', max: 1 });
    pool.on('error', () => undefined);
    pools.push(pool);
    const server = await serve({ pool });
    const body = await waitReady(server, 503, 'database down');
    expect(body.failing).toEqual(['database']);
    expect(body.checks['database']?.detail).toMatch(/^unreachable: /);
  });

  it('fails the database check after the time limit when the server does not answer', async () => {
    const sockets: Socket[] = [];
    const silent: Server = createServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as { port: number };
    const pool = new pg.Pool({ connectionString: `postgres://postgres@127.0.0.1:${port}/test`, max: 1 });
    pool.on('error', () => undefined);
    try {
      const server = await serve({ pool, checkTimeoutMs: 200 });
      const body = await waitReady(server, 503, 'database silent');
      expect(body.checks['database']?.detail).toMatch(
        /^unreachable: (no answer within 200 ms|the previous check has not been answered yet)$/,
      );
      await server.close();
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => silent.close(resolve));
      await pool.end().catch(() => undefined);
    }
  });

  it('refuses a bad port naming the field, and an address in use with TXO_METRICS_LISTEN', async () => {
    await expect(serveMetrics({ pool: db.pool, port: 70_000 })).rejects.toThrow(OutboxValidationError);
    await expect(serveMetrics({ pool: db.pool, port: 1.5 })).rejects.toThrow(/^port: /);
    const first = await serve({});
    await expect(serveMetrics({ pool: db.pool, port: first.port })).rejects.toMatchObject({
      code: 'TXO_METRICS_LISTEN',
    });
  });

  it('closes idempotently, and the port is free again', async () => {
    const server = await serve({});
    await Promise.all([server.close(), server.close()]);
    const again = await serve({ port: server.port });
    expect(again.port).toBe(server.port);
  });
});

/** A raw connection to the server: what it was sent, and when the server closed it (ms after connecting). */
interface RawConnection {
  readonly socket: Socket;
  received(): string;
  readonly closed: Promise<number>;
}

async function rawConnection(server: MetricsServer): Promise<RawConnection> {
  const socket = connect(server.port, '127.0.0.1');
  const sockets = rawSockets;
  sockets.push(socket);
  let received = '';
  socket.on('data', (chunk: Buffer) => {
    received += chunk.toString();
  });
  socket.on('error', () => undefined); // a reset from the server is a close like another
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  const connectedAt = performance.now();
  const closed = new Promise<number>((resolve) => {
    socket.once('close', () => resolve(performance.now() - connectedAt));
  });
  return { socket, received: () => received, closed };
}

const rawSockets: Socket[] = [];
afterEach(() => {
  for (const socket of rawSockets.splice(0)) socket.destroy();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Resolves to 'open' if `closed` has not settled within `ms`. */
function openAfter(closed: Promise<number>, ms: number): Promise<number | 'open'> {
  return Promise.race([closed, sleep(ms).then(() => 'open' as const)]);
}

describe('serveMetrics bounds its connections and their idle time', () => {
  it('holds at most maxConnections, closing one more at once (logged), and serves again once idle ones are dropped', async () => {
    const log = logRecorder();
    const server = await serve({ maxConnections: 3, idleTimeoutMs: 1000, logger: log.logger });
    const held = [await rawConnection(server), await rawConnection(server), await rawConnection(server)];
    await sleep(100); // accepted by the server
    const extra = await rawConnection(server);
    // Closed at once, not after the idle time: the cap, not the timeout.
    expect(await openAfter(extra.closed, 500)).not.toBe('open');
    expect(extra.received()).toBe('');
    await expect(fetch(`${server.url}/healthz`)).rejects.toThrow();
    expect(log.lines).toContainEqual(
      expect.objectContaining({
        level: 'warn',
        msg: expect.stringMatching(/connection cap/),
        obj: expect.objectContaining({ maxConnections: 3 }),
      }),
    );
    // The held connections send nothing: each is dropped after the idle time (and before 2 s).
    for (const connection of held) {
      const after = await openAfter(connection.closed, 2000);
      expect(after).not.toBe('open');
      expect(after).toBeGreaterThanOrEqual(900);
    }
    expect((await get(server, '/healthz')).status).toBe(200);
  });

  it('drops a connection kept alive after its answer and one sending its header slowly, never an answer under way', async () => {
    const registry = new Registry();
    let slow = false;
    new Gauge({
      name: 'slow_collect',
      help: 'takes 1.5 s to collect when asked to',
      registers: [registry],
      async collect() {
        if (slow) await sleep(1500);
        this.set(1);
      },
    });
    const server = await serve({ registry, idleTimeoutMs: 1000 });
    slow = true;
    // Three at once: a scrape that takes longer than the idle time, ...
    const scrape = get(server, '/metrics');
    // ... a connection kept alive after a quick answer, ...
    const keptAlive = await rawConnection(server);
    keptAlive.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    // ... and a header trickling in, a line every 200 ms (so never idle).
    const trickle = await rawConnection(server);
    trickle.socket.write('GET /healthz HTTP/1.1\r\n');
    const timer = setInterval(() => {
      if (!trickle.socket.destroyed) trickle.socket.write('x-slow: 1\r\n');
    }, 200);
    const [kept, trickled, answer] = await Promise.all([
      openAfter(keptAlive.closed, 3000),
      openAfter(trickle.closed, 3000),
      scrape,
    ]).finally(() => clearInterval(timer));
    // Answered, then dropped once idle for the idle time (the answer takes a few ms).
    expect(keptAlive.received()).toMatch(/^HTTP\/1\.1 200 /);
    expect(kept).not.toBe('open');
    expect(kept).toBeGreaterThanOrEqual(900);
    expect(kept).toBeLessThan(1800);
    // Dropped once its header took the idle time (checked every idle/4): 408, never served.
    expect(trickled).not.toBe('open');
    expect(trickled).toBeLessThan(1800);
    expect(trickle.received()).toMatch(/^(HTTP\/1\.1 408 .*)?$/s);
    // The slow answer was not cut.
    expect(answer.status).toBe(200);
    expect(answer.body).toContain('slow_collect 1');
  });

  it('refuses a bad maxConnections or idleTimeoutMs, naming the field', async () => {
    await expect(serveMetrics({ pool: db.pool, port: 0, maxConnections: 0 })).rejects.toThrow(
      /^maxConnections: /,
    );
    await expect(serveMetrics({ pool: db.pool, port: 0, idleTimeoutMs: 10 })).rejects.toThrow(
      /^idleTimeoutMs: /,
    );
  });
});
