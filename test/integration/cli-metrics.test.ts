/**
 * `tx-outbox relay --metrics-port`: the built CLI serves /metrics (the relay's registry plus the
 * process metrics, clean for `promtool check metrics`), /healthz and /readyz, and closes them on
 * SIGTERM. Bad metrics flags are usage errors naming the flag.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/schema/migrate.js';
import { waitFor } from '../helpers/db.js';
import { DATABASE_URL, NATS_URL } from '../helpers/env.js';
import { exited, freePort } from '../helpers/processes.js';
import { promtool } from '../helpers/promtool.js';

// The built CLI, as users run it (run `npm run build` before this file alone).
const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
const SCHEMA = `t_climetrics_${randomBytes(4).toString('hex')}`;

let pool: pg.Pool;
const children: ChildProcess[] = [];

beforeAll(async () => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  await migrate(pool, { schema: SCHEMA, partitions: 2 });
});

afterAll(async () => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  await pool?.query(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
  await pool?.end();
});

function relay(args: readonly string[]): { child: ChildProcess; stderr: () => string } {
  const child = spawn(
    process.execPath,
    [CLI, 'relay', '--schema', SCHEMA, '--poll-interval', '100', '--lease', '3000', ...args],
    { env: { ...process.env, DATABASE_URL }, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  children.push(child);
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return { child, stderr: () => stderr };
}

async function status(url: string): Promise<number | undefined> {
  try {
    return (await fetch(url)).status;
  } catch {
    return undefined;
  }
}

describe('tx-outbox relay --metrics-port', () => {
  it('is ready as soon as the relay started, not one check interval (5 s) later', async () => {
    const port = await freePort();
    const r = relay(['--nats', NATS_URL, '--metrics-port', String(port)]);
    await waitFor(() => /"msg":"tx-outbox relay started"/.test(r.stderr()), { what: 'relay started' });
    // Well inside the 5 s interval: the answer of a check run after the start.
    await waitFor(async () => (await status(`http://127.0.0.1:${port}/readyz`)) === 200, {
      what: '/readyz 200 right after the start',
      timeoutMs: 2500,
    });
  });

  it('serves /metrics, /healthz and /readyz, and closes them on SIGTERM', async () => {
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const r = relay(['--nats', NATS_URL, '--metrics-port', String(port)]);
    await waitFor(async () => (await status(`${base}/readyz`)) === 200, {
      what: `/readyz 200 (stderr: ${r.stderr()})`,
    });
    expect(await status(`${base}/healthz`)).toBe(200);
    const response = await fetch(`${base}/metrics`);
    expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = await response.text();
    expect(text).toContain(`tx_outbox_relay_ready{schema="${SCHEMA}",publisher="nats"} 1`);
    expect(text).toContain('process_cpu_seconds_total');
    // The relay's own metrics are on the same registry (createRelay({ metrics: registry })).
    expect(text).toContain(`tx_outbox_events_published_total{schema="${SCHEMA}",publisher="nats"} 0`);
    expect(text).toContain('# TYPE tx_outbox_commit_to_publish_seconds histogram');
    // The exposition is clean for Prometheus' own linter.
    const check = promtool(['check', 'metrics'], text);
    expect(check.output).toBe('');
    expect(check.status).toBe(0);
    expect(r.stderr()).toMatch(/"msg":"serving \/metrics, \/healthz and \/readyz"/);
    r.child.kill('SIGTERM');
    expect(await exited(r.child)).toBe(0);
    expect(await status(`${base}/healthz`)).toBeUndefined();
  });

  it('reads "metrics" from the config file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'txo-metrics-'));
    const file = join(dir, 'relay.json');
    const fromFile = await freePort();
    writeFileSync(
      file,
      JSON.stringify({
        publishers: { events: { kind: 'nats', url: NATS_URL } },
        metrics: { port: fromFile },
      }),
    );
    const r = relay(['--config', file]);
    await waitFor(async () => (await status(`http://127.0.0.1:${fromFile}/healthz`)) === 200, {
      what: `/healthz on the config file's port (stderr: ${r.stderr()})`,
    });
    r.child.kill('SIGTERM');
    expect(await exited(r.child)).toBe(0);
  });

  it('refuses bad metrics flags, naming the flag', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['--metrics-port', '70000'], /--metrics-port <port>.*Expected an integer from 0 to 65535/],
      [['--metrics-port', 'x'], /--metrics-port <port>.*Expected an integer/],
      [['--metrics-host', '127.0.0.1'], /--metrics-host needs --metrics-port <port>/],
    ];
    for (const [args, message] of cases) {
      const r = relay(['--nats', NATS_URL, ...args]);
      expect(await exited(r.child)).toBe(2);
      expect(r.stderr()).toMatch(message);
    }
  });

  it('a port in use is an error naming --metrics-port, and the relay exits 1', async () => {
    const port = await freePort();
    const first = relay(['--nats', NATS_URL, '--metrics-port', String(port)]);
    await waitFor(async () => (await status(`http://127.0.0.1:${port}/healthz`)) === 200, {
      what: 'the first relay serving',
    });
    const second = relay(['--nats', NATS_URL, '--metrics-port', String(port)]);
    expect(await exited(second.child)).toBe(1);
    expect(second.stderr()).toMatch(
      new RegExp(`--metrics-port ${port}: cannot serve metrics on 127.0.0.1:${port}: EADDRINUSE`),
    );
    first.child.kill('SIGTERM');
    expect(await exited(first.child)).toBe(0);
  });
});
