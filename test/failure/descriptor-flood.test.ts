/**
 * A flood of idle connections on the metrics port of a relay with few descriptors (`ulimit -n
 * 256`, 400 connections held from here, loopback only). The relay publishes to a webhook: every
 * publish opens a connection, so a process out of descriptors cannot send anything.
 *
 * - As `tx-outbox relay` runs it (the metrics server's default cap of 64 connections): the
 *   flood cannot use up the descriptors, and every event is delivered while it lasts.
 * - With the cap raised above the limit (`maxConnections`), the flood does use them up
 *   (EMFILE): no event may be charged an attempt for it, none may go dead, and all are
 *   delivered, in order, once the flood ends.
 *
 * Both run the BUILT package (`npm run build` before this file alone).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { enqueue } from '../../src/producer/enqueue.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { collectOutput, exited, freePort, waitForPort } from '../helpers/processes.js';

const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
const FIXTURE = fileURLToPath(new URL('./fixtures/webhook-relay-process.mjs', import.meta.url));
const DESCRIPTORS = 256;
const FLOOD = 400;
const AGGREGATES = 50;
const EVENTS = 200;

let db: TestDb;
let dir: string;
const children: ChildProcess[] = [];

beforeAll(async () => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  db = await createTestDb('fdflood', { partitions: 4, max: 4 });
  dir = mkdtempSync(join(tmpdir(), 'txo-fdflood-'));
});
afterEach(async () => {
  for (const child of children.splice(0)) {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited(child);
    }
  }
  await db.pool.query(`DELETE FROM "${db.schema}".events`);
  await db.pool.query(`UPDATE "${db.schema}".partitions SET owner = NULL, lease_until = '-infinity'`);
});
afterAll(async () => {
  await db?.close();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/** A webhook endpoint that answers 204 and keeps, per aggregate, the sequences it received. */
async function receiver(): Promise<{
  url: string;
  received: Map<string, number[]>;
  ids: Set<string>;
  server: Server;
}> {
  const received = new Map<string, number[]>();
  const ids = new Set<string>();
  const server = createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      const id = String(request.headers['webhook-id']);
      if (!ids.has(id)) {
        ids.add(id);
        const aggregate = String(request.headers['ce-aggregateid']);
        const list = received.get(aggregate) ?? [];
        list.push(Number(request.headers['ce-aggregatesequence']));
        received.set(aggregate, list);
      }
      response.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  return { url: `http://127.0.0.1:${port}/events`, received, ids, server };
}

/** `command` under `ulimit -n DESCRIPTORS`, its output collected. */
function limited(command: string, env: NodeJS.ProcessEnv): ReturnType<typeof collectOutput> {
  const child = spawn('bash', ['-c', `ulimit -n ${DESCRIPTORS} && exec ${command}`], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  return collectOutput(child);
}

/**
 * `count` idle connections to `port`, each opened again 250 ms after the server closes it, until
 * `end()`: the pressure an attacker keeps up. Nothing is ever sent on them.
 */
function flood(port: number, count: number): { end: () => void; opened: () => number } {
  let ended = false;
  let opened = 0;
  const sockets = new Set<Socket>();
  const open = (): void => {
    if (ended) return;
    const socket = connect(port, '127.0.0.1');
    sockets.add(socket);
    socket.on('connect', () => {
      opened += 1;
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      sockets.delete(socket);
      setTimeout(open, 250);
    });
  };
  for (let i = 0; i < count; i++) open();
  return {
    end: () => {
      ended = true;
      for (const socket of sockets) socket.destroy();
    },
    opened: () => opened,
  };
}

async function enqueueEvents(prefix: string): Promise<void> {
  await inTransaction(db.pool, (tx) =>
    enqueue(
      tx,
      Array.from({ length: EVENTS }, (_, i) => ({
        aggregateType: 'flood',
        aggregateId: `${prefix}${i % AGGREGATES}`,
        type: 'flood.tested',
        payload: { i },
      })),
      { schema: db.schema },
    ),
  );
}

async function outbox(): Promise<{ left: number; attempts: number; dead: number }> {
  const { rows } = await db.pool.query<{ left: number; attempts: number; dead: number }>(
    `SELECT count(*)::int AS left, coalesce(sum(attempts), 0)::int AS attempts,
            count(*) FILTER (WHERE status = 'dead')::int AS dead
       FROM "${db.schema}".events`,
  );
  return rows[0]!;
}

/** Every event received once, each aggregate's in sequence order. */
function expectAllInOrder(received: Map<string, number[]>, ids: Set<string>): void {
  expect(ids.size).toBe(EVENTS);
  expect(received.size).toBe(AGGREGATES);
  for (const sequences of received.values()) {
    expect(sequences).toEqual(Array.from({ length: EVENTS / AGGREGATES }, (_, i) => i + 1));
  }
}

describe(`an idle-connection flood on the metrics port of a relay with ${DESCRIPTORS} descriptors`, () => {
  it('tx-outbox relay keeps delivering: its metrics server holds at most 64 connections', async () => {
    const hook = await receiver();
    const secret = join(dir, 'webhook-secret');
    writeFileSync(secret, 'a-test-secret\n', { mode: 0o600 });
    const port = await freePort();
    const relay = limited(
      [
        process.execPath,
        CLI,
        'relay',
        `--schema ${db.schema}`,
        `--webhook ${hook.url}`,
        `--webhook-secret-file ${secret}`,
        `--metrics-port ${port}`,
        '--max-attempts 3',
        '--poll-interval 100',
        '--lease 3000',
      ].join(' '),
      { DATABASE_URL },
    );
    let attack: ReturnType<typeof flood> | undefined;
    try {
      await waitFor(() => /"msg":"tx-outbox relay started"/.test(relay.stderr()), {
        what: `the relay to start (stderr: ${relay.stderr()})`,
        timeoutMs: 10_000,
      });
      await waitForPort(port);
      attack = flood(port, FLOOD);
      await waitFor(() => attack!.opened() >= FLOOD, { what: 'the flood to connect', timeoutMs: 5000 });
      await enqueueEvents('capped');
      // Delivered while the flood goes on: the relay still has descriptors to connect with.
      await waitFor(async () => (await outbox()).left === 0, {
        what: 'every event delivered during the flood',
        timeoutMs: 10_000,
      });
      expect(relay.stderr()).toMatch(/"maxConnections":64,[^\n]*"msg":"metrics server at its connection cap/);
      expect(relay.stderr()).not.toMatch(/EMFILE/);
      expectAllInOrder(hook.received, hook.ids);
    } finally {
      attack?.end();
      hook.server.close();
    }
  });

  it('with the cap raised, the flood uses up the descriptors: no attempt charged, nothing dead, all delivered after it', async () => {
    const hook = await receiver();
    const port = await freePort();
    const relay = limited(`${process.execPath} ${FIXTURE}`, {
      TXO_FIXTURE: JSON.stringify({
        databaseUrl: DATABASE_URL,
        schema: db.schema,
        webhookUrl: hook.url,
        metricsPort: port,
        maxConnections: 10_000,
        idleTimeoutMs: 60_000,
        maxAttempts: 3,
        backoff: { baseMs: 100, capMs: 1000 },
      }),
    });
    let attack: ReturnType<typeof flood> | undefined;
    try {
      await waitFor(() => /"msg":"started"/.test(relay.stdout()), {
        what: `the relay to start (stdout: ${relay.stdout()} stderr: ${relay.stderr()})`,
        timeoutMs: 10_000,
      });
      await waitForPort(port);
      attack = flood(port, FLOOD);
      await waitFor(() => attack!.opened() >= FLOOD, { what: 'the flood to connect', timeoutMs: 5000 });
      await enqueueEvents('raised');
      // The relay tried to publish, and found no descriptor to connect to the webhook with.
      const verdict =
        /"msg":"(broker unavailable: [^"]*|publish failed; will retry|event is dead[^"]*)"[^\n]*EMFILE|EMFILE[^\n]*"msg":"(broker unavailable: [^"]*|publish failed; will retry|event is dead[^"]*)"/;
      await waitFor(() => verdict.test(relay.stdout()), {
        what: `a publish refused for EMFILE (stdout: ${relay.stdout().slice(-2000)})`,
        timeoutMs: 10_000,
      });
      // Long enough for three attempts of every head event (backoff from 100 ms). A connection
      // may get through now and then (Node closes one flood connection when accept hits EMFILE):
      // what matters is that no event was charged for the ones that did not.
      await new Promise((resolve) => setTimeout(resolve, 1500));
      expect(await outbox()).toMatchObject({ attempts: 0, dead: 0 });
      expect(relay.stdout()).toMatch(
        /"msg":"broker unavailable: publishes refused; retrying with backoff, no attempt charged"/,
      );
      expect(relay.stdout()).toMatch(/"error":"this process has no file descriptor left[^"]*\(EMFILE\)/);
      attack.end();
      await waitFor(async () => (await outbox()).left === 0, {
        what: 'every event delivered after the flood',
        timeoutMs: 15_000,
      });
      expectAllInOrder(hook.received, hook.ids);
    } finally {
      attack?.end();
      hook.server.close();
    }
  });
});
