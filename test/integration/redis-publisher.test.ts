import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import diagnosticsChannel from 'node:diagnostics_channel';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { isBrokerUnavailable, OutboxError, OutboxValidationError, PublishError } from '../../src/errors.js';
import type { OutboxMessage, Publisher, PublishOutcome } from '../../src/publishers/contract.js';
import {
  PAYLOAD_FIELD,
  type RedisPublisherOptions,
  redisPublisher,
} from '../../src/publishers/redis/index.js';
import { TcpProxy } from '../../src/testing/index.js';
import { makeMessage } from '../helpers/messages.js';
import { exited, freePort, waitForPort } from '../helpers/processes.js';
import {
  connectRedis,
  deleteKeys,
  type Entry,
  entries,
  REDIS_URL,
  type RedisTestClient,
} from '../helpers/redis.js';
import { expectNoUnhandledRejections } from '../helpers/unhandled.js';

const broker = new URL(REDIS_URL);
// Unique per run: test files run in parallel against one shared Redis. Every key this file
// creates starts with ROOT and is deleted in afterAll.
const ROOT = `txo-redis-${randomBytes(4).toString('hex')}`;

type Client = RedisTestClient;
let redis: Client;
const publishers: Publisher[] = [];

const never = (): AbortSignal => new AbortController().signal;

function publisher(options: Partial<RedisPublisherOptions> = {}): Publisher {
  const created = redisPublisher({
    ...(options.client ? {} : { url: REDIS_URL }),
    keyPrefix: `${ROOT}:guard`,
    ...options,
  });
  publishers.push(created);
  return created;
}

/**
 * What node-redis reports sending for the commands `mine` selects: their names, and the
 * round trips (a round trip starts with a command sent after a reply was received).
 */
function watchCommands(mine: (ctx: CommandContext) => boolean): {
  readonly names: string[];
  readonly roundTrips: () => number;
  stop(): void;
} {
  const names: string[] = [];
  let roundTrips = 0;
  let replySinceLastSend = true;
  const replied = (ctx: unknown): void => {
    if (mine(ctx as CommandContext)) replySinceLastSend = true;
  };
  const handlers = {
    start(ctx: unknown) {
      if (!mine(ctx as CommandContext)) return;
      names.push((ctx as CommandContext).command);
      if (replySinceLastSend) roundTrips += 1;
      replySinceLastSend = false;
    },
    asyncEnd: replied,
    error: replied,
    end() {},
    asyncStart() {},
  };
  const channel = diagnosticsChannel.tracingChannel('node-redis:command');
  channel.subscribe(handlers);
  return { names, roundTrips: () => roundTrips, stop: () => channel.unsubscribe(handlers) };
}

interface CommandContext {
  readonly command: string;
  readonly clientId: string;
  readonly serverPort: number | undefined;
}

function expectFailure(outcome: PublishOutcome | undefined, retryable: boolean): PublishError {
  if (outcome === undefined || outcome.ok)
    throw new Error(`expected a failed outcome, got ${JSON.stringify(outcome)}`);
  expect(outcome.retryable).toBe(retryable);
  expect(outcome.error).toBeInstanceOf(PublishError);
  return outcome.error as PublishError;
}

async function waitFor(check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

expectNoUnhandledRejections();

beforeAll(async () => {
  redis = await connectRedis();
});

afterAll(async () => {
  await Promise.allSettled(publishers.map((p) => p.close()));
  await deleteKeys(redis, `${ROOT}:*`);
  await redis.close();
});

// --- Redis-specific behaviour ---------------------------------------------------------------

describe('redisPublisher', () => {
  let n = 0;
  const key = (name: string): string => `${ROOT}:t${++n}:${name}`;

  it('appends one entry per message: envelope fields, then the payload bytes untouched', async () => {
    const stream = key('envelope');
    const pub = publisher({ ceSource: 'orders-service' });
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const binary = new Uint8Array([0, 255, 1, 254, 10, 13]);
    const batch = [
      makeMessage({
        topic: stream,
        aggregateId: 'o-1',
        sequence: 3,
        schemaVersion: 2,
        headers: { traceparent, tracestate: 'k=v', 'x-tenant': 'acme', [PAYLOAD_FIELD]: 'dropped' },
        payload: binary.subarray(1), // a view into a larger buffer
        contentType: 'application/octet-stream',
      }),
      makeMessage({ topic: stream, aggregateId: 'o-2', json: { hello: 'wörld' } }),
    ];
    expect(await pub.publish(batch, never())).toEqual([{ ok: true }, { ok: true }]);

    const got = await entries(redis, stream);
    expect(got).toHaveLength(2);
    const [first, second] = got as [Entry, Entry];
    const m = batch[0]!;
    const text = Object.fromEntries(
      Object.entries(first.fields)
        .filter(([k]) => k !== PAYLOAD_FIELD)
        .map(([k, v]) => [k, v.toString()]),
    );
    expect(text).toEqual({
      traceparent,
      tracestate: 'k=v',
      'x-tenant': 'acme',
      specversion: '1.0',
      id: m.eventId,
      source: 'orders-service',
      type: m.type,
      time: m.createdAt.toISOString(),
      subject: 'o-1',
      datacontenttype: 'application/octet-stream',
      aggregatetype: m.aggregateType,
      aggregateid: 'o-1',
      sequence: '0000000000000000003',
      aggregatesequence: '3',
      schemaversion: '2',
    });
    expect(Object.keys(first.fields).at(-1)).toBe(PAYLOAD_FIELD);
    expect(first.fields[PAYLOAD_FIELD]!.equals(Buffer.from([255, 1, 254, 10, 13]))).toBe(true);
    expect(second.fields[PAYLOAD_FIELD]!.toString()).toBe(JSON.stringify({ hello: 'wörld' }));
    // The guard holds the id of the entry it protects.
    expect(await redis.get(`${ROOT}:guard:dedup:${m.eventId}`)).toBe(first.id);
  });

  it('picks the stream: topic, else aggregateType.type, or the stream function', async () => {
    const prefix = key('routing');
    const pub = publisher({ keyPrefix: prefix });
    const noTopic = makeMessage({ topic: null, aggregateType: `${prefix}:order`, type: 'created' });
    const withTopic = makeMessage({ topic: `${prefix}:explicit` });
    expect(await pub.publish([noTopic, withTopic], never())).toEqual([{ ok: true }, { ok: true }]);
    expect(await redis.xLen(`${prefix}:order.created`)).toBe(1);
    expect(await redis.xLen(`${prefix}:explicit`)).toBe(1);

    const routed = publisher({
      keyPrefix: prefix,
      destination: (m) => {
        if (m.aggregateId === 'boom') throw new Error('no route');
        return m.aggregateId === 'empty' ? '' : `${prefix}:by-aggregate:${m.aggregateId}`;
      },
    });
    const outcomes = await routed.publish(
      [
        makeMessage({ aggregateId: 'a' }),
        makeMessage({ aggregateId: 'boom' }),
        makeMessage({ aggregateId: 'empty' }),
      ],
      never(),
    );
    expect(outcomes[0]).toEqual({ ok: true });
    expect(expectFailure(outcomes[1], false).message).toContain('no route');
    expect(expectFailure(outcomes[2], false).message).toContain('Invalid stream key');
    expect(await redis.xLen(`${prefix}:by-aggregate:a`)).toBe(1);
  });

  it('still takes the deprecated `stream` spelling of `destination`, warning once', async () => {
    const prefix = key('old-spelling');
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const pub = publisher({ keyPrefix: prefix, stream: () => `${prefix}:old` });
      publisher({ keyPrefix: prefix, stream: () => `${prefix}:old` });
      expect(await pub.publish([makeMessage({ topic: `${prefix}:topic` })], never())).toEqual([{ ok: true }]);
      expect(await redis.xLen(`${prefix}:old`)).toBe(1);
      const deprecations = warn.mock.calls.filter(([text]) => /`stream` is deprecated/.test(String(text)));
      expect(deprecations).toHaveLength(1);
    } finally {
      warn.mockRestore();
    }
    expect(() => publisher({ stream: () => 'a', destination: () => 'b' })).toThrow(OutboxValidationError);
  });

  it('WRONGTYPE fails only that message, permanently, and writes no guard (both or neither)', async () => {
    const prefix = key('wrongtype');
    const stream = `${prefix}:stream`;
    await redis.set(stream, 'a string');
    const pub = publisher({ keyPrefix: prefix });
    const m = makeMessage({ topic: stream });
    const [outcome] = await pub.publish([m], never());
    const error = expectFailure(outcome, false);
    expect(error.message).toContain('WRONGTYPE');
    expect(error.message).toContain(m.eventId);
    expect(await redis.exists(`${prefix}:dedup:${m.eventId}`)).toBe(0);
    // Once the key is fixed, the same event is appended (its guard did not survive the failure).
    await redis.del(stream);
    expect(await pub.publish([m], never())).toEqual([{ ok: true }]);
    expect(await redis.xLen(stream)).toBe(1);
  });

  it('dedup window: a republish is not appended; after the guard expired it is', async () => {
    const prefix = key('window');
    const stream = `${prefix}:stream`;
    const pub = publisher({ keyPrefix: prefix, dedupWindowMs: 700 });
    const m = makeMessage({ topic: stream });
    const guard = `${prefix}:dedup:${m.eventId}`;
    expect(await pub.publish([m], never())).toEqual([{ ok: true }]);
    const ttl = await redis.pTTL(guard);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(700);
    // Republished in the same batch and in a later one: delivered, stored once.
    expect(await pub.publish([m, m], never())).toEqual([{ ok: true }, { ok: true }]);
    expect(await redis.xLen(stream)).toBe(1);
    const [original] = await entries(redis, stream);
    expect(await redis.get(guard)).toBe(original!.id);

    await waitFor(async () => (await redis.pTTL(guard)) === -2, 3000);
    expect(await pub.publish([m], never())).toEqual([{ ok: true }]);
    const after = await entries(redis, stream);
    expect(after).toHaveLength(2);
    expect(after.map((e) => e.fields['id']!.toString())).toEqual([m.eventId, m.eventId]);
    expect(await redis.get(guard)).toBe(after[1]!.id);
  });

  it('dedupWindowMs: 0 sends a plain XADD: no guard, a republish is appended again', async () => {
    const prefix = key('noguard');
    const stream = `${prefix}:stream`;
    const pub = publisher({ keyPrefix: prefix, dedupWindowMs: 0 });
    const m = makeMessage({ topic: stream });
    expect(await pub.publish([m], never())).toEqual([{ ok: true }]);
    expect(await pub.publish([m], never())).toEqual([{ ok: true }]);
    expect(await redis.xLen(stream)).toBe(2);
    expect(await redis.exists(`${prefix}:dedup:${m.eventId}`)).toBe(0);
  });

  it('maxLen trims the stream: exactly with approximate: false, by whole nodes with ~', async () => {
    const prefix = key('maxlen');
    const exact = `${prefix}:exact`;
    const approx = `${prefix}:approx`;
    const batch = (stream: string, count: number): OutboxMessage[] =>
      Array.from({ length: count }, (_, i) => makeMessage({ topic: stream, sequence: i + 1 }));

    const exactBatch = batch(exact, 50);
    const exactPub = publisher({ keyPrefix: prefix, maxLen: { count: 10, approximate: false } });
    expect((await exactPub.publish(exactBatch, never())).every((o) => o.ok)).toBe(true);
    const kept = await entries(redis, exact);
    expect(kept.map((e) => e.fields['id']!.toString())).toEqual(exactBatch.slice(-10).map((m) => m.eventId));

    for (const dedupWindowMs of [60_000, 0]) {
      const stream = `${approx}:${dedupWindowMs}`;
      const approxPub = publisher({
        keyPrefix: prefix,
        dedupWindowMs,
        maxLen: { count: 100, approximate: true },
      });
      expect((await approxPub.publish(batch(stream, 1000), never())).every((o) => o.ok)).toBe(true);
      const length = await redis.xLen(stream);
      expect(length).toBeGreaterThanOrEqual(100);
      expect(length).toBeLessThan(300); // stream-node-max-entries (100) per macro node
    }
  });

  it('pipelines a 5,000-message batch: every command is written before the first reply (one round trip)', async () => {
    const prefix = key('pipeline');
    const stream = `${prefix}:stream`;
    const client: Client = createClient({ url: REDIS_URL });
    client.on('error', () => undefined);
    await client.connect();
    try {
      const pub = publisher({ client, keyPrefix: prefix });
      const mine = (ctx: CommandContext): boolean => ctx.clientId === client._clientId;
      // First batch: the script is loaded in the same pipeline, in front of the EVALSHAs.
      const first = watchCommands(mine);
      try {
        const batch = Array.from({ length: 3 }, () => makeMessage({ topic: stream }));
        expect(await pub.publish(batch, never())).toEqual(batch.map(() => ({ ok: true })));
      } finally {
        first.stop();
      }
      expect(first.names).toEqual(['SCRIPT', 'EVALSHA', 'EVALSHA', 'EVALSHA']);
      expect(first.roundTrips()).toBe(1);

      // Steady state: 5,000 EVALSHAs, all written before the first reply is read.
      const watch = watchCommands(mine);
      let outcomes: PublishOutcome[];
      try {
        const batch = Array.from({ length: 5000 }, (_, i) =>
          makeMessage({ topic: stream, aggregateId: `a${i}`, json: { i, pad: 'x'.repeat(200) } }),
        );
        outcomes = await pub.publish(batch, never());
      } finally {
        watch.stop();
      }
      expect(outcomes.every((o) => o.ok)).toBe(true);
      expect(watch.names).toHaveLength(5000);
      expect(new Set(watch.names)).toEqual(new Set(['EVALSHA']));
      expect(watch.roundTrips()).toBe(1);
      expect(await redis.xLen(stream)).toBe(5003);
      await pub.close();
      // A given client is the caller's: still open after close().
      expect(client.isReady).toBe(true);
      await expect(pub.publish([makeMessage({ topic: stream })], never())).rejects.toMatchObject({
        code: 'TXO_PUBLISHER_CLOSED',
      });
    } finally {
      await client.close();
    }
  });

  it('a given client that is not open fails as BROKER_UNAVAILABLE, without opening it', async () => {
    const client: Client = createClient({ url: REDIS_URL });
    const pub = publisher({ client });
    const [outcome] = await pub.publish([makeMessage({ topic: key('closed') })], never());
    expect(isBrokerUnavailable(expectFailure(outcome, true))).toBe(true);
    expect(client.isOpen).toBe(false);
  });

  it('an aborted batch fails its messages as retryable, at once', async () => {
    const pub = publisher({ keyPrefix: key('abort') });
    const controller = new AbortController();
    controller.abort(new Error('relay stopping'));
    const [outcome] = await pub.publish([makeMessage({ topic: key('abort-stream') })], controller.signal);
    expect(expectFailure(outcome, true).message).toContain('relay stopping');
  });

  it('close() is idempotent and later publishes reject with TXO_PUBLISHER_CLOSED', async () => {
    const pub = publisher();
    expect(await pub.publish([makeMessage({ topic: key('close') })], never())).toEqual([{ ok: true }]);
    await Promise.all([pub.close(), pub.close()]);
    await pub.close();
    const rejection = pub.publish([makeMessage({ topic: key('close') })], never());
    await expect(rejection).rejects.toBeInstanceOf(OutboxError);
    await expect(rejection).rejects.toMatchObject({ code: 'TXO_PUBLISHER_CLOSED' });
  });

  it('validates its options', () => {
    const client = createClient();
    expect(() => redisPublisher({})).toThrow(OutboxValidationError);
    expect(() => redisPublisher({ url: REDIS_URL, client })).toThrow(/only one/);
    expect(() => redisPublisher({ client, clientOptions: {} })).toThrow(OutboxValidationError);
    expect(() => redisPublisher({ url: REDIS_URL, dedupWindowMs: -1 })).toThrow(/dedupWindowMs/);
    expect(() => redisPublisher({ url: REDIS_URL, dedupWindowMs: 1.5 })).toThrow(/dedupWindowMs/);
    expect(() => redisPublisher({ url: REDIS_URL, maxLen: { count: 0 } })).toThrow(/maxLen/);
    expect(() => redisPublisher({ url: REDIS_URL, timeoutMs: 0 })).toThrow(/timeoutMs/);
    expect(() => redisPublisher({ url: REDIS_URL, keyPrefix: '' })).toThrow(/keyPrefix/);
    expect(() => redisPublisher({ url: 'http://nope' })).toThrow(/url/);
  });

  it('a Redis that stops answering: the batch fails as BROKER_UNAVAILABLE within timeoutMs; close() does not hang', async () => {
    const proxy = await TcpProxy.start({ host: broker.hostname, port: Number(broker.port || 6379) });
    try {
      const pub = publisher({
        url: `redis://127.0.0.1:${proxy.port}`,
        keyPrefix: key('frozen'),
        timeoutMs: 500,
      });
      expect(await pub.publish([makeMessage({ topic: key('frozen-stream') })], never())).toEqual([
        { ok: true },
      ]);
      // What the client sends is swallowed (its answers would still pass): a server that stops answering.
      proxy.stall({ only: 'upstream', drop: true });
      const started = Date.now();
      const outcomes = await pub.publish(
        Array.from({ length: 3 }, () => makeMessage({ topic: key('frozen-stream') })),
        never(),
      );
      expect(Date.now() - started).toBeLessThan(2000);
      for (const outcome of outcomes) {
        const error = expectFailure(outcome, true);
        expect(isBrokerUnavailable(error)).toBe(true);
        expect(error.message).toContain('within 500 ms');
      }
      const closing = Date.now();
      await pub.close();
      expect(Date.now() - closing).toBeLessThan(2000);
    } finally {
      await proxy.close();
    }
  });

  it('close() while the client keeps trying to connect to a Redis that is down returns at once', async () => {
    const pub = publisher({ url: `redis://127.0.0.1:${await freePort()}`, timeoutMs: 300 });
    const [outcome] = await pub.publish([makeMessage({ topic: key('nowhere') })], never());
    expect(isBrokerUnavailable(expectFailure(outcome, true))).toBe(true);
    const started = Date.now();
    await pub.close();
    expect(Date.now() - started).toBeLessThan(500);
  });

  describe('on a private redis-server (stopped, restarted, out of memory)', () => {
    let server: PrivateRedis;

    beforeAll(async () => {
      server = await PrivateRedis.create();
    });
    afterAll(async () => {
      await server?.destroy();
    });

    it('down at first: BROKER_UNAVAILABLE, no crash; up: works; restarted (script cache empty): works again', async () => {
      const pub = redisPublisher({ url: server.url, timeoutMs: 1000 }); // default keyPrefix: tx-outbox
      publishers.push(pub);
      const stream = 'events';
      const [down] = await pub.publish([makeMessage({ topic: stream })], never());
      const error = expectFailure(down, true);
      expect(isBrokerUnavailable(error)).toBe(true);
      expect(error.message).toContain('Redis is not available');

      await server.up();
      const first = makeMessage({ topic: stream });
      await waitFor(async () => (await pub.publish([first], never()))[0]!.ok, 10_000);

      await server.down();
      const [lost] = await pub.publish([makeMessage({ topic: stream })], never());
      expect(isBrokerUnavailable(expectFailure(lost, true))).toBe(true);

      await server.up(); // a new, empty server: no stream, no script
      const again = makeMessage({ topic: stream });
      await waitFor(async () => (await pub.publish([again], never()))[0]!.ok, 10_000);
      const check = createClient({ url: server.url });
      check.on('error', () => undefined);
      await check.connect();
      try {
        const stored = await entries(check, stream);
        expect(stored.map((e) => e.fields['id']!.toString())).toEqual([again.eventId]);
        expect(await check.exists(`tx-outbox:dedup:${again.eventId}`)).toBe(1);

        // The script cache emptied under a live connection: NOSCRIPT, reloaded, resent.
        await check.scriptFlush();
        const watch = watchCommands(
          (ctx) => ctx.serverPort === server.port && (ctx.command === 'EVALSHA' || ctx.command === 'SCRIPT'),
        );
        try {
          expect(await pub.publish([makeMessage({ topic: stream })], never())).toEqual([{ ok: true }]);
        } finally {
          watch.stop();
        }
        expect(watch.names).toEqual(['EVALSHA', 'SCRIPT', 'EVALSHA']);
        expect(await check.xLen(stream)).toBe(2);
      } finally {
        await check.close();
      }
    }, 30_000);

    it('OOM is retryable as broker-unavailable (no attempt charged); nothing is written', async () => {
      const check = createClient({ url: server.url });
      check.on('error', () => undefined);
      await check.connect();
      try {
        const pub = redisPublisher({ url: server.url, timeoutMs: 2000 }); // default keyPrefix: tx-outbox
        publishers.push(pub);
        const stream = 'oom';
        expect(await pub.publish([makeMessage({ topic: stream })], never())).toEqual([{ ok: true }]);
        await check.configSet('maxmemory', '1');
        const m = makeMessage({ topic: stream });
        const [outcome] = await pub.publish([m], never());
        const error = expectFailure(outcome, true);
        expect(isBrokerUnavailable(error)).toBe(true);
        expect(error.message).toContain('OOM');
        expect(await check.exists(`tx-outbox:dedup:${m.eventId}`)).toBe(0);
        await check.configSet('maxmemory', '0');
        expect(await pub.publish([m], never())).toEqual([{ ok: true }]);
        expect(await check.xLen(stream)).toBe(2);
      } finally {
        await check.configSet('maxmemory', '0').catch(() => undefined);
        await check.close();
      }
    });
  });
});

// --- helpers -------------------------------------------------------------------------------

/** A throwaway redis-server (no persistence) on its own port, stopped and started at will. */
class PrivateRedis {
  readonly dir = mkdtempSync(join(tmpdir(), 'txo-redis-'));
  #child: ChildProcess | undefined;

  private constructor(readonly port: number) {}

  static async create(): Promise<PrivateRedis> {
    return new PrivateRedis(await freePort());
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async up(): Promise<void> {
    const bin = process.env['REDIS_SERVER_BIN'] ?? 'redis-server';
    const args = ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
    this.#child = spawn(bin, [...args, '--dir', this.dir], { stdio: 'ignore' });
    await waitForPort(this.port);
  }

  async down(): Promise<void> {
    const child = this.#child;
    this.#child = undefined;
    if (!child) return;
    child.kill('SIGKILL');
    await exited(child);
  }

  async destroy(): Promise<void> {
    await this.down();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
