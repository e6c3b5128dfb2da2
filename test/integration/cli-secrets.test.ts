/**
 * Secrets stay out of logs, the database and CLI output, with the built CLI as users run
 * it: a webhook URL with a password and a query token, failing with 500 (a real HTTP server
 * on loopback that echoes the request back, as error pages do), must not show either in the
 * relay's log lines, in `events.last_error`, or in `tx-outbox dead list`; and the signing
 * secret comes from a file or the environment, never needing the command line.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/cli/config.js';
import { enqueue } from '../../src/producer/enqueue.js';
import { verifyWebhookEvent } from '../../src/publishers/webhook/index.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { collectOutput } from '../helpers/processes.js';

// The built CLI (`npm run build` first).
const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
const SECRET = `whsec_${randomBytes(24).toString('base64')}`;
const PASSWORD = 's3cretPw';
const TOKEN = 't0kenValue';
const BASIC = Buffer.from(`user:${PASSWORD}`).toString('base64');

let db: TestDb;
let dir: string;
const children: ChildProcess[] = [];

beforeAll(async () => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  db = await createTestDb('cli_secrets', { partitions: 2 });
  dir = mkdtempSync(join(tmpdir(), 'txo-secrets-'));
});

afterAll(async () => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
  await db?.close();
});

function start(args: readonly string[], env: Record<string, string | undefined> = {}) {
  const fullEnv: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL, ...env };
  for (const [key, value] of Object.entries(env)) if (value === undefined) delete fullEnv[key];
  const child = spawn(process.execPath, [CLI, ...args], { env: fullEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  const { done } = collectOutput(child);
  return { child, done };
}

function expectNoSecret(text: string, where: string): void {
  for (const secret of [PASSWORD, TOKEN, BASIC, SECRET]) {
    expect(text.includes(secret), `${where} shows a secret: ${text}`).toBe(false);
  }
}

interface Echo {
  readonly url: string;
  readonly seen: Array<{ path: string; authorization: string | undefined; signed: boolean }>;
  close(): Promise<void>;
}

/** Answers every POST with 500 and an error page quoting the request, credentials included. */
async function startEchoServer(): Promise<Echo> {
  const seen: Echo['seen'] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const signed = verifyWebhookEvent({
        secret: SECRET,
        headers: req.headers,
        body: Buffer.concat(chunks),
      }).ok;
      seen.push({ path: req.url ?? '', authorization: req.headers.authorization, signed });
      res
        .writeHead(500, { 'content-type': 'text/plain' })
        .end(`Internal error handling POST ${req.url} (authorization: ${req.headers.authorization})`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://user:${PASSWORD}@127.0.0.1:${port}/hook?token=${TOKEN}`,
    seen,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe('secrets stay out of logs, last_error and the CLI', () => {
  it('a failing webhook URL with a password and a token: none of it in the log, last_error or dead list', async () => {
    const echo = await startEchoServer();
    const secretFile = join(dir, 'webhook-secret');
    writeFileSync(secretFile, `${SECRET}\n`, { mode: 0o600 });
    try {
      const { eventId } = await inTransaction(db.pool, (tx) =>
        enqueue(
          tx,
          { aggregateType: 'order', aggregateId: 'leak', type: 'order.placed', payload: {} },
          {
            schema: db.schema,
          },
        ),
      );
      const relay = start([
        'relay',
        '--schema',
        db.schema,
        '--webhook',
        echo.url,
        '--webhook-secret-file',
        secretFile,
        '--max-attempts',
        '2',
        '--poll-interval',
        '100',
        '--log-level',
        'debug',
      ]);
      await waitFor(
        async () => {
          const { rows } = await db.pool.query(
            `SELECT status FROM "${db.schema}".events WHERE event_id = $1`,
            [eventId],
          );
          return rows[0]?.status === 'dead';
        },
        { what: 'the event to go dead', timeoutMs: 20_000 },
      );
      relay.child.kill('SIGTERM');
      const logged = await relay.done;
      expect(logged.code).toBe(0);
      expect(logged.stderr).toMatch(/"msg":"publish failed; will retry"/);
      expect(logged.stderr).toMatch(/"msg":"event is dead/);
      expect(logged.stderr).toMatch(/user:\*\*\*@127\.0\.0\.1:\d+\/hook\?token=\*\*\*/);
      expectNoSecret(logged.stderr, 'the relay log');

      // Deliverable as given: the receiver got the Basic credentials, the token and a valid signature.
      expect(echo.seen.length).toBe(2);
      for (const request of echo.seen) {
        expect(request).toEqual({
          path: `/hook?token=${TOKEN}`,
          authorization: `Basic ${BASIC}`,
          signed: true,
        });
      }

      const { rows } = await db.pool.query(
        `SELECT last_error FROM "${db.schema}".events WHERE event_id = $1`,
        [eventId],
      );
      expect(rows[0].last_error).toMatch(/HTTP 500/);
      expectNoSecret(rows[0].last_error, 'events.last_error');

      for (const args of [[], ['--json']]) {
        const listed = await start(['dead', 'list', '--schema', db.schema, ...args]).done;
        expect(listed.code).toBe(0);
        expect(listed.stdout).toContain(eventId);
        expectNoSecret(listed.stdout + listed.stderr, `dead list ${args.join(' ')}`);
      }
    } finally {
      await echo.close();
    }
  });

  it('--webhook-secret on the command line still works but warns, without echoing the secret', async () => {
    // A schema that does not exist: the relay warns, then stops at its first check.
    const result = await start([
      'relay',
      '--schema',
      `${db.schema}_missing`,
      '--webhook',
      'http://127.0.0.1:9/hook',
      '--webhook-secret',
      SECRET,
    ]).done;
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/--webhook-secret is visible to other users in `ps`/);
    expect(result.stderr).toMatch(/TX_OUTBOX_WEBHOOK_SECRET/);
    expectNoSecret(result.stderr, 'the relay output');
  });

  it('addresses with a password or token on the relay command line warn (ps), without echoing them', async () => {
    const database = new URL(DATABASE_URL);
    database.password = PASSWORD;
    const result = await start(
      [
        'relay',
        '--schema',
        `${db.schema}_missing`,
        '--database-url',
        database.href,
        '--webhook',
        `http://user:${PASSWORD}@127.0.0.1:9/hook?token=${TOKEN}`,
      ],
      { [`TX_OUTBOX_WEBHOOK_SECRET`]: SECRET },
    ).done;
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/--database-url carries a password or token[^\n]*`ps`[^\n]*DATABASE_URL/);
    expect(result.stderr).toMatch(/--webhook carries a password or token[^\n]*`ps`[^\n]*--config/);
    expectNoSecret(result.stderr, 'the relay output');
    // An address without secrets is no reason to warn.
    const plain = await start([
      'relay',
      '--schema',
      `${db.schema}_missing`,
      '--redis',
      'redis://127.0.0.1:6379',
    ]).done;
    expect(plain.stderr).not.toMatch(/carries a password or token/);
  });

  it('every command taking --database-url warns about a password in it (ps), naming the fix, never the password', async () => {
    const database = new URL(DATABASE_URL);
    database.password = PASSWORD;
    const inQuery = new URL(DATABASE_URL);
    inQuery.searchParams.set('password', PASSWORD);
    // The password in the userinfo for each command; in the query (`?password=`) for one.
    const runs: ReadonlyArray<readonly [readonly string[], number, string]> = [
      [['migrate'], 0, database.href],
      [['status'], 0, database.href],
      [['dead', 'list'], 0, database.href],
      [['event', randomUUID()], 3, database.href],
      [['prune', '--dry-run'], 0, database.href],
      [['inbox', 'list'], 0, database.href],
      [['cdc', 'status'], 0, database.href],
      [['history', 'maintain'], 0, database.href],
      [['status'], 0, inQuery.href],
    ];
    for (const [command, code, url] of runs) {
      // DATABASE_URL unset: the command connects with the URL of the flag (the server trusts it).
      const result = await start([...command, '--schema', db.schema, '--database-url', url], {
        DATABASE_URL: undefined,
      }).done;
      const what = `${command.join(' ')} (${url === database.href ? 'userinfo' : 'query'})`;
      expect(result.code, `${what}: ${result.stderr}`).toBe(code);
      expect(result.stderr, what).toMatch(
        /--database-url carries a password or token, visible to other users in `ps`[^\n]*set DATABASE_URL instead[^\n]*PGPASSWORD/,
      );
      expectNoSecret(result.stdout + result.stderr, what);
    }
    // No password in the URL: no warning.
    const plain = await start(['status', '--schema', db.schema, '--database-url', DATABASE_URL], {
      DATABASE_URL: undefined,
    }).done;
    expect(plain.code, plain.stderr).toBe(0);
    expect(plain.stderr).not.toMatch(/carries a password/);
  });

  it('refuses --webhook-secret with --webhook-secret-file, and an empty secret file, naming the flag', async () => {
    const both = await start([
      'relay',
      '--webhook',
      'http://127.0.0.1:9/hook',
      '--webhook-secret',
      SECRET,
      '--webhook-secret-file',
      join(dir, 'nope'),
    ]).done;
    expect(both.code).toBe(2);
    expect(both.stderr).toMatch(/--webhook-secret-file or --webhook-secret, not both/);
    expectNoSecret(both.stderr, 'the usage error');

    const empty = join(dir, 'empty-secret');
    writeFileSync(empty, '\n');
    const result = await start(
      ['relay', '--webhook', 'http://127.0.0.1:9/hook', '--webhook-secret-file', empty],
      {
        TX_OUTBOX_WEBHOOK_SECRET: undefined,
      },
    ).done;
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/--webhook-secret-file: .* is empty/);
  });

  it('a config file names its secret file, relative to the config; "secret" and "secretFile" exclude each other', async () => {
    const configDir = mkdtempSync(join(dir, 'config-'));
    const file = join(configDir, 'tx-outbox.config.json');
    writeFileSync(
      file,
      JSON.stringify({
        publishers: { hooks: { kind: 'webhook', url: 'http://127.0.0.1:9/hook', secretFile: 'hook.secret' } },
      }),
    );
    const config = await loadConfig(file);
    expect(config.publishers['hooks']).toMatchObject({ secretFile: join(configDir, 'hook.secret') });

    writeFileSync(
      file,
      JSON.stringify({
        publishers: {
          hooks: { kind: 'webhook', url: 'http://127.0.0.1:9/hook', secret: 'x', secretFile: 'y' },
        },
      }),
    );
    await expect(loadConfig(file)).rejects.toThrow(
      /publishers\.hooks\.secretFile: give "secret" or "secretFile"/,
    );
  });
});
