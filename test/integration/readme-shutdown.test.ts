/**
 * The README's "Create the schema" and "Run a relay" code, taken from README.md itself and
 * run as a child process against the real PostgreSQL and a real nats-server: after
 * `relay.stop()` (and whatever else the README's shutdown shows) the process must exit by
 * itself. Only the NATS address is changed (a private server, so the README's stream ORDERS
 * cannot clash with anyone's), the database is a private one (the README uses the default
 * schema), and the "… on shutdown" comment becomes "once the events are delivered".
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enqueue } from '../../src/producer/enqueue.js';
import { migrate } from '../../src/schema/migrate.js';
import { inTransaction, waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { readStream } from '../helpers/nats-stream.js';
import { exited, PrivateNats } from '../helpers/processes.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const README = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
const DATABASE = `txo_readme_${randomBytes(4).toString('hex')}`;

let admin: pg.Pool;
let nats: PrivateNats;
let child: ChildProcess | undefined;

beforeAll(async () => {
  if (!existsSync(`${ROOT}/dist/index.js`)) throw new Error('dist/ is missing: run `npm run build` first');
  admin = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
  await admin.query(`CREATE DATABASE "${DATABASE}"`);
  nats = await PrivateNats.start();
});

afterAll(async () => {
  if (child?.exitCode === null) child.kill('SIGKILL');
  await nats?.destroy();
  await admin?.query(`DROP DATABASE IF EXISTS "${DATABASE}" WITH (FORCE)`);
  await admin?.end();
});

/** The first ```ts block after the heading. */
function codeAfter(heading: string): string {
  const at = README.indexOf(heading);
  if (at < 0) throw new Error(`README.md has no heading "${heading}"`);
  const match = /```ts\n([\s\S]*?)```/.exec(README.slice(at));
  if (!match) throw new Error(`README.md has no ts block after "${heading}"`);
  return match[1]!;
}

function databaseUrl(): string {
  const url = new URL(DATABASE_URL);
  url.pathname = `/${DATABASE}`;
  return url.toString();
}

describe('README: run a relay, then shut down', () => {
  it('the process exits by itself after the shutdown the README shows', async () => {
    const url = databaseUrl();
    const setup = new pg.Pool({ connectionString: url, max: 2 });
    try {
      await migrate(setup);
      await inTransaction(setup, (tx) =>
        enqueue(
          tx,
          Array.from({ length: 3 }, (_, i) => ({
            aggregateType: 'order',
            aggregateId: `o${i}`,
            type: 'placed',
            payload: { i },
          })),
        ),
      );
    } finally {
      await setup.end();
    }

    const relaySection = codeAfter('### 3. Run a relay');
    expect(relaySection).toContain("'nats://127.0.0.1:4222'");
    expect(relaySection).toContain('// … on shutdown:');
    const code = [
      codeAfter('### 1. Create the schema'),
      relaySection.replace("'nats://127.0.0.1:4222'", JSON.stringify(nats.url)).replace(
        '// … on shutdown:',
        `for (;;) {
             const { rows } = await pool.query('SELECT count(*)::int AS n FROM outbox.events');
             if (rows[0].n === 0) break;
             await new Promise((r) => setTimeout(r, 50));
           }
           process.stdout.write('stopping\\n');`,
      ),
      "process.stdout.write('stopped\\n');",
    ].join('\n');

    // Run from the repository, so `tx-outbox` and `tx-outbox/nats` resolve to this package (dist/).
    child = spawn(process.execPath, ['--input-type=module', '-e', code], {
      cwd: ROOT,
      env: { ...process.env, DATABASE_URL: url },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let stdout = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    const exit = exited(child);
    await waitFor(() => stdout.includes('stopped\n') || child?.exitCode !== null, {
      timeoutMs: 30_000,
      what: 'the README code to deliver the events and stop the relay',
    });
    expect(stdout).toBe('stopping\nstopped\n');
    const stoppedAt = Date.now();
    const code0 = await Promise.race([
      exit,
      new Promise<'still running'>((r) => setTimeout(() => r('still running'), 5000)),
    ]);
    expect(code0).toBe(0);
    expect(Date.now() - stoppedAt).toBeLessThan(5000);
    expect(await readStream(nats.url, 'ORDERS')).toHaveLength(3);
  });
});
