/**
 * A PostgreSQL connection terminated (pg_terminate_backend, as a database restart does) in the
 * middle of a call that holds a checked-out client: node-postgres emits 'error' on that client,
 * and pg-pool listens only while the client is idle in the pool. Each case runs in a process of
 * its own (fixtures/connection-loss.ts) so that an unhandled 'error' shows as a crash: the call
 * must reject, the process must survive, and the same call must then succeed.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool } from '../../src/cli/common.js';
import { migrationSql } from '../../src/schema/migrate.js';
import { createTestDb, type TestDb, waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { exited } from '../helpers/processes.js';

const FIXTURE = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'connection-loss.ts');

let db: TestDb;

beforeAll(async () => {
  db = await createTestDb('connection_loss', { partitions: 4 });
});
afterAll(async () => {
  await db?.close();
});

interface Report {
  readonly code: number | null;
  readonly stderr: string;
  readonly first?: { ok: boolean; value?: unknown; error?: string };
  readonly second?: { ok: boolean; value?: unknown; error?: string };
}

async function run(scenario: string): Promise<Report> {
  const app = `txo-conn-${randomBytes(4).toString('hex')}`;
  const child = spawn(process.execPath, ['--import', 'tsx', FIXTURE], {
    env: {
      ...process.env,
      TXO_FIXTURE: JSON.stringify({ databaseUrl: DATABASE_URL, schema: db.schema, scenario, app }),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let stderr = '';
  child.stdout!.on('data', (c: Buffer) => {
    out += c.toString();
  });
  child.stderr!.on('data', (c: Buffer) => {
    stderr += c.toString();
  });
  const code = await exited(child);
  const line = out.split('\n').find((l) => l.startsWith('{'));
  return { code, stderr, ...(line ? (JSON.parse(line) as object) : {}) };
}

/** The process lived, the first call rejected with the connection's end, the second succeeded. */
function expectSurvived(report: Report): void {
  expect(report.stderr).not.toMatch(/Unhandled 'error' event|uncaught/i);
  expect(report.code, report.stderr).toBe(0);
  expect(report.first?.ok).toBe(false);
  expect(report.first?.error).toMatch(/terminat|connection/i);
  expect(report.second?.ok).toBe(true);
}

describe('failure: a checked-out connection terminated mid-transaction', () => {
  it('inTransaction: killed while idle in the transaction, the call rejects and the process lives', async () => {
    const report = await run('inTransaction, idle in transaction');
    expectSurvived(report);
    expect(report.second?.value).toBe(1);
  });

  it('inTransaction: killed during a statement, the call rejects and the process lives', async () => {
    const report = await run('inTransaction, in a statement');
    expectSurvived(report);
    expect(report.second?.value).toBe(1);
  });

  it('inbox.handle: rejects (the adapter redelivers), charges no attempt, the next delivery applies', async () => {
    const report = await run('inbox.handle');
    expectSurvived(report);
    expect(report.second?.value).toEqual({ status: 'processed', chargedAttempts: [] });
  });

  it('inbox.replayReleased: rejects, and the released message is replayed by the next call', async () => {
    const report = await run('inbox.replayReleased');
    expectSurvived(report);
    expect(report.second?.value).toEqual([{ status: 'processed' }]);
  });

  it('releaseQuarantined: rejects, and the next release goes through', async () => {
    const report = await run('quarantine release');
    expectSurvived(report);
    expect(report.second?.value).toHaveLength(1);
  });

  it('replayDead: rejects, and the next replay goes through', async () => {
    const report = await run('dead replay');
    expectSurvived(report);
    expect(report.second?.value).toHaveLength(1);
  });

  it('relay: every connection it holds is terminated; it reconnects and publishes the next event', async () => {
    const report = await run('relay');
    expectSurvived(report);
    expect(report.first?.error).toMatch(/terminated [3-9] connections/);
    expect(report.second?.value).toEqual({ published: true });
  });

  it('migrate: killed while waiting for the migration lock, rejects, and the next run succeeds', async () => {
    const report = await run('migrate');
    expectSurvived(report);
    // The fixture left the last migration pending: the killed run applied nothing, the next one applies it.
    expect(report.second?.value).toMatchObject({ applied: [migrationSql().at(-1)!.version] });
  });
});

describe('failure: an idle connection of a pool the CLI created is terminated', () => {
  it('is logged as one warning, without the client pg-pool hangs on the error', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const app = `txo-idle-${randomBytes(4).toString('hex')}`;
    const pool = createPool(`${DATABASE_URL}?application_name=${app}`, logger, 1);
    try {
      await pool.query('SELECT 1');
      await db.pool.query(
        'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1',
        [app],
      );
      await waitFor(() => lines.length > 0, { what: 'the warning' });
      expect(lines[0]).toMatchObject({ msg: 'idle database connection failed', err: { code: '57P01' } });
      expect(lines[0]!['err']).not.toHaveProperty('client');
      expect((await pool.query<{ n: number }>('SELECT 1 AS n')).rows[0]!.n).toBe(1);
    } finally {
      await pool.end();
    }
  });
});
