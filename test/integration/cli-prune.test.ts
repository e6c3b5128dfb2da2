import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { collectOutput, type ProcessRun } from '../helpers/processes.js';

const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

let db: TestDb;
beforeAll(async () => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  db = await createTestDb('cli_prune');
});
afterAll(async () => {
  await db?.close();
});

function run(args: readonly string[]): Promise<ProcessRun> {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...process.env, DATABASE_URL },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return collectOutput(child).done;
}

describe('tx-outbox prune', () => {
  it('prints what it removed per table; --dry-run removes nothing', async () => {
    const s = `"${db.schema}"`;
    await db.pool.query(`INSERT INTO ${s}.aggregate_sequences (aggregate_type, aggregate_id, last_sequence, written_at)
      VALUES ('order', 'old', 4, now() - interval '9 days'), ('order', 'new', 2, now())`);
    await db.pool.query(`INSERT INTO ${s}.aggregate_progress (aggregate_type, aggregate_id, delivered_sequence)
      VALUES ('order', 'old', 4), ('order', 'new', 2)`);
    // An aggregate on caller versions (no sequence row), last delivered long ago.
    await db.pool.query(`INSERT INTO ${s}.aggregate_progress (aggregate_type, aggregate_id, delivered_sequence, delivered_at)
      VALUES ('order', 'versioned', 9, now() - interval '9 days')`);
    await db.pool.query(
      `INSERT INTO ${s}.relays (relay_id, host, pid, lease_ms, heartbeat_at) VALUES ('gone', 'h', 1, 1, now() - interval '3 days')`,
    );

    const dry = await run(['prune', '--schema', db.schema, '--dry-run']);
    expect(dry.stderr).toBe('');
    expect(dry.code).toBe(0);
    expect(dry.stdout).toMatch(/^aggregate_sequences\s+would remove 1$/m);
    expect(dry.stdout).toMatch(/^aggregate_progress\s+would remove 2$/m);
    expect(dry.stdout).toMatch(/^relays\s+would remove 1$/m);
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM ${s}.aggregate_sequences`);
    expect(rows[0].n).toBe(2);

    const real = await run(['prune', '--schema', db.schema, '--older-than', '8d']);
    expect(real.code).toBe(0);
    expect(real.stdout).toMatch(/^aggregate_sequences\s+removed 1$/m);
    expect(real.stdout).toMatch(/^aggregate_progress\s+removed 2$/m);
    expect(real.stdout).toMatch(/^relays\s+removed 1$/m);
    expect(real.stdout).toMatch(/^sequence floor: 4$/m);

    const json = await run(['prune', '--schema', db.schema, '--json']);
    expect(JSON.parse(json.stdout)).toMatchObject({ ran: true, complete: true, floor: 4 });
  });

  it('--inbox needs --replay-horizon; a bad duration is one error line', async () => {
    const missing = await run(['prune', '--schema', db.schema, '--inbox']);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(missing.stderr).toMatch(/^tx-outbox: --replay-horizon/);
    const bad = await run(['prune', '--schema', db.schema, '--older-than', '30s']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/^tx-outbox: .*aggregateRetentionMs/);
  });
});
