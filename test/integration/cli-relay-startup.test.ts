/**
 * `tx-outbox relay` started before its database is up (a deploy where both start together):
 * it waits and retries, logging the redacted address, until the database answers, then
 * relays; a signal while it waits stops it cleanly. The database "comes up" when a
 * TcpProxy starts listening on the port the relay was given, in front of the shared server.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enqueue } from '../../src/producer/enqueue.js';
import { migrate } from '../../src/schema/migrate.js';
import { TcpProxy } from '../../src/testing/tcp-proxy.js';
import { inTransaction, waitFor } from '../helpers/db.js';
import { DATABASE_URL, NATS_URL } from '../helpers/env.js';
import { deleteStream, readStream } from '../helpers/nats-stream.js';
import { exited, freePort } from '../helpers/processes.js';

// The built CLI, as users run it (run `npm run build` before this file alone).
const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
const SCHEMA = `t_clistart_${randomBytes(4).toString('hex')}`;
const PASSWORD = `pw${randomBytes(6).toString('hex')}`;

let pool: pg.Pool;
const children: ChildProcess[] = [];
const cleanups: Array<() => Promise<void>> = [];

beforeAll(async () => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  await migrate(pool, { schema: SCHEMA, partitions: 2 });
});

afterAll(async () => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  for (const f of cleanups) await f();
  await pool?.query(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
  await pool?.end();
});

/** The relay CLI against a database URL with a password, on a port where nothing listens yet. */
function startRelay(port: number, args: readonly string[]): { child: ChildProcess; stderr: () => string } {
  const database = new URL(DATABASE_URL);
  database.host = `127.0.0.1:${port}`;
  database.password = PASSWORD; // trust authentication ignores it; it must not be logged
  const child = spawn(
    process.execPath,
    [CLI, 'relay', '--schema', SCHEMA, '--poll-interval', '100', '--lease', '3000', ...args],
    { env: { ...process.env, DATABASE_URL: database.toString() }, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  children.push(child);
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return { child, stderr: () => stderr };
}

/** Until the relay says it waits for the database; fails at once if it exits instead. */
async function waitForWaiting(relay: { child: ChildProcess; stderr: () => string }): Promise<void> {
  await waitFor(
    () => {
      if (relay.child.exitCode !== null) {
        throw new Error(`the relay exited with ${relay.child.exitCode}: ${relay.stderr()}`);
      }
      return relay.stderr().includes('database not reachable yet');
    },
    { timeoutMs: 10_000, what: 'the first "not reachable" line' },
  );
}

describe('tx-outbox relay started before its database', () => {
  it('waits for the database (logging its redacted address), then relays', async () => {
    const tag = randomBytes(4).toString('hex');
    const stream = `TXO_CLISTART_${tag}`;
    cleanups.push(() => deleteStream(NATS_URL, stream));
    await inTransaction(pool, (tx) =>
      enqueue(
        tx,
        Array.from({ length: 5 }, (_, i) => ({
          aggregateType: 'order',
          aggregateId: `o${i}`,
          type: 'order.placed',
          topic: `clistart${tag}.order`,
          payload: { i },
        })),
        { schema: SCHEMA },
      ),
    );
    const port = await freePort();
    const relay = startRelay(port, [
      '--nats',
      NATS_URL,
      '--nats-stream',
      stream,
      '--nats-subjects',
      `clistart${tag}.>`,
    ]);
    await waitForWaiting(relay);
    await new Promise((r) => setTimeout(r, 1500));
    expect(relay.child.exitCode).toBeNull(); // still waiting (the old code exited 1 at once)
    expect(relay.stderr()).toMatch(
      new RegExp(`"database":"postgres://(postgres:)?\\*\\*\\*@127\\.0\\.0\\.1:${port}/`),
    );
    expect(relay.stderr()).not.toContain(PASSWORD);

    const proxy = await TcpProxy.start(
      { host: '127.0.0.1', port: Number(new URL(DATABASE_URL).port || 5432) },
      { port, hangUp: 'reset' },
    );
    cleanups.push(() => proxy.close());
    await waitFor(
      async () => {
        const { rows } = await pool.query(`SELECT count(*)::int AS n FROM "${SCHEMA}".events`);
        return rows[0].n === 0;
      },
      { timeoutMs: 30_000, what: 'the events relayed once the database is up' },
    );
    expect(await readStream(NATS_URL, stream)).toHaveLength(5);
    expect(relay.stderr()).toMatch(/"msg":"database reachable"/);

    relay.child.kill('SIGTERM');
    expect(await exited(relay.child)).toBe(0);
    expect(relay.stderr()).toMatch(/"msg":"tx-outbox relay stopped"/);
    expect(relay.stderr()).not.toContain(PASSWORD);
  });

  it('a database that takes the connection but never answers is waited for, said, and a signal stops it', async () => {
    // A stalled link, or a server host that accepts TCP but hangs: each try must time out on
    // its own, or the relay hangs silently and ignores SIGTERM until the OS gives up.
    const proxy = await TcpProxy.start(
      { host: '127.0.0.1', port: new URL(DATABASE_URL).port ? Number(new URL(DATABASE_URL).port) : 5432 },
      { hangUp: 'reset' },
    );
    cleanups.push(() => proxy.close());
    proxy.stall();
    const relay = startRelay(proxy.port, ['--nats', NATS_URL]);
    await waitForWaiting(relay);
    const signalledAt = Date.now();
    relay.child.kill('SIGTERM');
    expect(await exited(relay.child)).toBe(0);
    expect(Date.now() - signalledAt).toBeLessThan(3000);
    expect(relay.stderr()).not.toContain(PASSWORD);
  });

  it('a signal while it waits stops it cleanly (exit 0)', async () => {
    const port = await freePort();
    const relay = startRelay(port, ['--nats', NATS_URL]);
    await waitForWaiting(relay);
    const signalledAt = Date.now();
    relay.child.kill('SIGTERM');
    expect(await exited(relay.child)).toBe(0);
    expect(Date.now() - signalledAt).toBeLessThan(3000);
  });
});
