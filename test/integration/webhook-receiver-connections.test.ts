/**
 * The webhook receiver against clients that misbehave on the wire (raw sockets on
 * loopback): headers or a body trickled in cannot hold a connection past the timeouts,
 * and a client that goes away mid-request is no error worth a stack trace.
 */
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createWebhookServer,
  type WebhookServer,
  type WebhookServerOptions,
} from '../../src/consumers/webhook.js';
import { createInbox } from '../../src/inbox/inbox.js';
import type { Logger } from '../../src/logger.js';
import { createTestDb, type TestDb } from '../helpers/db.js';

const SECRET = `whsec_${Buffer.from('a-32-byte-secret-for-the-tests!!').toString('base64')}`;

interface Entry {
  readonly level: 'debug' | 'info' | 'warn' | 'error';
  readonly obj: object;
  readonly msg: string | undefined;
}

let db: TestDb;
const servers: WebhookServer[] = [];
const sockets: Socket[] = [];

beforeAll(async () => {
  db = await createTestDb('webhook_receiver_connections');
});

afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await Promise.all(servers.map((s) => s.close()));
  await db?.close();
});

function capturingLogger(entries: Entry[]): Logger {
  const at =
    (level: Entry['level']) =>
    (obj: object, msg?: string): void => {
      entries.push({ level, obj, msg });
    };
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

async function start(options: Partial<WebhookServerOptions> = {}): Promise<{ port: number }> {
  const server = await createWebhookServer({
    inbox: createInbox({ pool: db.pool, consumer: `conn-${servers.length}`, schema: db.schema }),
    handler: async () => {},
    secret: SECRET,
    ...options,
  });
  servers.push(server);
  return { port: Number(new URL(server.url).port) };
}

/** A raw connection; `closed` resolves with what the server sent and when it closed. */
function open(port: number): { socket: Socket; closed: Promise<{ afterMs: number; received: string }> } {
  const socket = connect(port, '127.0.0.1');
  sockets.push(socket);
  const started = Date.now();
  let received = '';
  socket.on('data', (chunk: Buffer) => {
    received += chunk.toString('latin1');
  });
  socket.on('error', () => {});
  const closed = new Promise<{ afterMs: number; received: string }>((resolve) => {
    socket.on('close', () => resolve({ afterMs: Date.now() - started, received }));
  });
  return { socket, closed };
}

/** Writes `piece` every `everyMs` until the socket closes or `maxMs` passed. */
function trickle(socket: Socket, piece: string, everyMs: number, maxMs: number): void {
  const started = Date.now();
  const timer = setInterval(() => {
    if (socket.destroyed || Date.now() - started > maxMs) clearInterval(timer);
    else socket.write(piece);
  }, everyMs);
  socket.on('close', () => clearInterval(timer));
}

/** Whichever comes first: the connection closed, or `ms` passed (then `undefined`). */
function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  return Promise.race([
    promise,
    new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), ms)),
  ]);
}

describe('webhook receiver: slow and vanishing clients', () => {
  it('closes a connection whose headers trickle in past headersTimeoutMs', async () => {
    const { port } = await start({ headersTimeoutMs: 1000 });
    const { socket, closed } = open(port);
    socket.write('POST /events HTTP/1.1\r\nHost: 127.0.0.1\r\n');
    trickle(socket, 'x-slow: y\r\n', 100, 10_000);
    const result = await within(closed, 4000);
    expect(result, 'connection still open after 4 s').toBeDefined();
    expect(result!.afterMs).toBeLessThan(2500);
  });

  it('answers 408 and closes a connection whose body trickles in past bodyTimeoutMs', async () => {
    const entries: Entry[] = [];
    const { port } = await start({
      bodyTimeoutMs: 1000,
      requestTimeoutMs: 60_000,
      logger: capturingLogger(entries),
    });
    const { socket, closed } = open(port);
    socket.write(
      'POST /events HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n',
    );
    trickle(socket, 'x', 100, 10_000);
    const result = await within(closed, 4000);
    expect(result, 'connection still open after 4 s').toBeDefined();
    expect(result!.afterMs).toBeLessThan(2500);
    expect(result!.received).toMatch(/^HTTP\/1\.1 408/);
    expect(entries.filter((e) => e.level === 'error' || e.level === 'warn')).toEqual([]);
  });

  it('closes a connection whose request as a whole takes longer than requestTimeoutMs', async () => {
    const { port } = await start({ headersTimeoutMs: 1000, requestTimeoutMs: 1000, bodyTimeoutMs: 60_000 });
    const { socket, closed } = open(port);
    socket.write('POST /events HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-length: 100000\r\n\r\n');
    trickle(socket, 'x', 100, 10_000);
    const result = await within(closed, 4000);
    expect(result, 'connection still open after 4 s').toBeDefined();
    expect(result!.afterMs).toBeLessThan(2500);
  });

  it('logs a client that disconnects mid-body at debug level at most, without a stack', async () => {
    const entries: Entry[] = [];
    const { port } = await start({ logger: capturingLogger(entries) });
    for (let i = 0; i < 3; i++) {
      const { socket, closed } = open(port);
      socket.write('POST /events HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-length: 1000\r\n\r\n{"partial":');
      await new Promise((resolve) => setTimeout(resolve, 100));
      socket.destroy();
      await closed;
    }
    await new Promise((resolve) => setTimeout(resolve, 300));
    const loud = entries.filter((e) => e.level !== 'debug');
    expect(loud, JSON.stringify(loud)).toEqual([]);
    // Not even at debug level does a routine disconnect carry an error (and its stack).
    expect(entries.filter((e) => 'err' in e.obj)).toEqual([]);
  });

  it('rejects timeouts that contradict each other at the door', async () => {
    await expect(start({ headersTimeoutMs: 5000, requestTimeoutMs: 1000 })).rejects.toThrow(
      /headersTimeoutMs.*requestTimeoutMs/,
    );
    await expect(start({ bodyTimeoutMs: 0 })).rejects.toThrow(/bodyTimeoutMs/);
  });
});
