import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { outboxStatus } from '../../src/ops/status.js';
import { enqueue } from '../../src/producer/enqueue.js';
import { verifyWebhook } from '../../src/publishers/webhook/index.js';
import { migrate, migrationSql } from '../../src/schema/migrate.js';
import { inTransaction, waitFor } from '../helpers/db.js';
import { DATABASE_URL, NATS_URL } from '../helpers/env.js';
import { type CollectedProcess, collectOutput, type ProcessRun } from '../helpers/processes.js';

// The built CLI, as users run it (`npm test` builds first; run `npm run build` before this file alone).
const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
const SCHEMA = `t_cli_${randomBytes(4).toString('hex')}`;
const SECRET = `whsec_${randomBytes(24).toString('base64')}`;

type Run = ProcessRun;
type Started = CollectedProcess;

let pool: pg.Pool;
const children: ChildProcess[] = [];

beforeAll(() => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
});

afterAll(async () => {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await pool?.query(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
  await pool?.end();
});

function cliEnv(overrides: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL, ...overrides };
  for (const [key, value] of Object.entries(overrides)) if (value === undefined) delete env[key];
  return env;
}

function start(args: readonly string[], env: NodeJS.ProcessEnv = cliEnv()): Started {
  const child = spawn(process.execPath, [CLI, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  return collectOutput(child);
}

function run(args: readonly string[], env?: NodeJS.ProcessEnv): Promise<Run> {
  return start(args, env).done;
}

/** The error contract: exactly one line `tx-outbox: …` and no stack trace. */
function expectOneErrorLine(result: Run): string {
  const lines = result.stderr.trimEnd().split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(/^tx-outbox: /);
  expect(result.stderr).not.toMatch(/^\s+at /m);
  return lines[0]!;
}

describe('tx-outbox CLI', () => {
  it('migrates, then status --json shows the fields', async () => {
    const migrated = await run(['migrate', '--schema', SCHEMA, '--partitions', '4']);
    expect(migrated.stderr).toBe('');
    expect(migrated.code).toBe(0);
    // Every migration, whatever their number now.
    const all = migrationSql();
    expect(migrated.stdout).toContain(
      `Applied ${all.length} migrations (${all.map((m) => `${String(m.version).padStart(3, '0')}_${m.name}`).join(', ')})`,
    );

    const again = await run(['migrate', '--schema', SCHEMA]);
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/Nothing to apply/);

    const status = await run(['status', '--json', '--schema', SCHEMA]);
    expect(status.code).toBe(0);
    const parsed = JSON.parse(status.stdout) as Record<string, unknown>;
    expect(parsed).toMatchObject({
      exact: true,
      pending: 0,
      oldestPendingAgeSeconds: null,
      dead: 0,
      retrying: 0,
      partitionsUnowned: 4,
      relaysLive: 0,
      relays: [],
    });
    expect(parsed['partitions']).toHaveLength(4);
    expect((parsed['partitions'] as unknown[])[0]).toEqual({
      partition: 0,
      owner: null,
      epoch: 0,
      leaseExpiresInSeconds: null,
      pending: 0,
      oldestPendingAgeSeconds: null,
    });

    const table = await run(['status', '--schema', SCHEMA]);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/pending\s+0/);
    expect(table.stdout).toMatch(/partitions unowned\s+4/);
    expect(table.stdout).toMatch(/Partitions \(4\)/);
    expect(table.stdout).not.toMatch(/estimated/);

    const exact = await run(['status', '--exact', '--json', '--schema', SCHEMA]);
    expect(exact.code).toBe(0);
    expect(JSON.parse(exact.stdout)).toMatchObject({ exact: true, pending: 0 });
  });

  it('status on a missing schema fails with one line that says to migrate', async () => {
    const result = await run(['status', '--schema', `${SCHEMA}_missing`]);
    expect(result.code).toBe(1);
    expect(expectOneErrorLine(result)).toMatch(/tx-outbox migrate/);
    expect(result.stdout).toBe('');
  });

  it('--verbose adds the stack trace', async () => {
    const result = await run(['--verbose', 'status', '--schema', `${SCHEMA}_missing`]);
    expect(result.code).toBe(1);
    expect(result.stderr.split('\n')[0]).toMatch(/^tx-outbox: .*migrate/);
    expect(result.stderr).toMatch(/^\s+at /m);
  });

  it('relay without a publisher is bad usage (exit 2)', async () => {
    const result = await run(['relay', '--schema', SCHEMA]);
    expect(result.code).toBe(2);
    expect(expectOneErrorLine(result)).toMatch(/--nats.*--webhook/);
  });

  it('relay with a --ce-source (or deprecated --source) that is not a URI-reference is bad usage naming the flag', async () => {
    const result = await run([
      'relay',
      '--schema',
      SCHEMA,
      '--redis',
      'redis://127.0.0.1:1',
      '--ce-source',
      'orders service',
    ]);
    expect(result.code).toBe(2);
    expect(expectOneErrorLine(result)).toMatch(/--ce-source: has " " at index 6/);
    // The deprecated spelling is checked the same way; a bare word there is neither poll nor cdc.
    const deprecated = await run([
      'relay',
      '--schema',
      SCHEMA,
      '--redis',
      'redis://127.0.0.1:1',
      '--source',
      'orders/ service',
    ]);
    expect(deprecated.code).toBe(2);
    expect(expectOneErrorLine(deprecated)).toMatch(/--source: has " " at index 7/);
    const bare = await run([
      'relay',
      '--schema',
      SCHEMA,
      '--redis',
      'redis://127.0.0.1:1',
      '--source',
      'orders',
    ]);
    expect(bare.code).toBe(2);
    expect(expectOneErrorLine(bare)).toMatch(/neither poll nor cdc.*--ce-source/);
    const alone = await run(['relay', '--schema', SCHEMA, '--source', 'urn:x:y']);
    expect(alone.code).toBe(2);
    expect(expectOneErrorLine(alone)).toMatch(/--source goes with a publisher flag/);
  });

  it('relay with a non-numeric --batch-size is bad usage naming the flag', async () => {
    const result = await run([
      'relay',
      '--schema',
      SCHEMA,
      '--webhook',
      'http://127.0.0.1:1/',
      '--batch-size',
      'abc',
    ]);
    expect(result.code).toBe(2);
    expect(expectOneErrorLine(result)).toMatch(/--batch-size/);
  });

  it('dead list shows none as JSON; dead replay needs a reason and ids or --all with a filter', async () => {
    await run(['migrate', '--schema', SCHEMA, '--partitions', '4']);
    const list = await run(['dead', 'list', '--json', '--schema', SCHEMA]);
    expect(list.code).toBe(0);
    expect(JSON.parse(list.stdout)).toEqual([]);
    const noReason = await run(['dead', 'replay', '--all', '--schema', SCHEMA]);
    expect(noReason.code).toBe(2);
    expect(expectOneErrorLine(noReason)).toMatch(/--reason/);
    const noIds = await run(['dead', 'replay', '--reason', 'fixed', '--schema', SCHEMA]);
    expect(noIds.code).toBe(2);
    expect(expectOneErrorLine(noIds)).toMatch(/--all/);
    const badId = await run(['dead', 'replay', 'not-a-uuid', '--reason', 'fixed', '--schema', SCHEMA]);
    expect(badId.code).toBe(2);
    expect(expectOneErrorLine(badId)).toMatch(/eventIds/);
    // Every dead event at once is never one keystroke away: --all takes a filter, and counts first.
    const unfiltered = await run(['dead', 'replay', '--all', '--reason', 'fixed', '--schema', SCHEMA]);
    expect(unfiltered.code).toBe(2);
    expect(expectOneErrorLine(unfiltered)).toMatch(/--all needs at least one filter/);
    const all = await run([
      'dead',
      'replay',
      '--all',
      '--since',
      '1h',
      '--reason',
      'fixed',
      '--schema',
      SCHEMA,
    ]);
    expect(all.code, all.stderr).toBe(0);
    expect(all.stdout).toBe('0 dead events match; replaying\nReplayed 0 dead events.\n');
  });

  it('inbox list/release/prune: JSON list, a reason required, no pruning inside the replay horizon', async () => {
    await run(['migrate', '--schema', SCHEMA, '--partitions', '4']);
    const list = await run(['inbox', 'list', '--json', '--schema', SCHEMA]);
    expect(list.code).toBe(0);
    expect(JSON.parse(list.stdout)).toEqual([]);
    const noReason = await run(['inbox', 'release', '1', '--schema', SCHEMA]);
    expect(noReason.code).toBe(2);
    expect(expectOneErrorLine(noReason)).toMatch(/--reason/);
    const tooSoon = await run([
      'inbox',
      'prune',
      '--older-than',
      '1h',
      '--replay-horizon',
      '1d',
      '--schema',
      SCHEMA,
    ]);
    expect(tooSoon.code).toBe(2);
    expect(expectOneErrorLine(tooSoon)).toMatch(/replay horizon/);
    const ok = await run([
      'inbox',
      'prune',
      '--older-than',
      '30d',
      '--replay-horizon',
      '7d',
      '--schema',
      SCHEMA,
    ]);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/Pruned 0 dedup record/);
  });

  it('numbers beyond what the database takes are bad usage naming the argument and the range, not a SQL error', async () => {
    await run(['migrate', '--schema', SCHEMA, '--partitions', '4']);
    const huge = '99999999999999999999';
    const show = await run(['inbox', 'show', huge, '--schema', SCHEMA]);
    expect(show.code).toBe(2);
    expect(expectOneErrorLine(show)).toMatch(
      /"99999999999999999999" is not a quarantine id.*1 to 9223372036854775807/,
    );
    const release = await run(['inbox', 'release', '1', huge, '--reason', 'fixed', '--schema', SCHEMA]);
    expect(release.code).toBe(2);
    expect(expectOneErrorLine(release)).toMatch(/not a quarantine id/);
    for (const [flag, value] of [
      ['--older-than', `${huge}d`],
      ['--older-than', '9999999999d'],
      ['--replay-horizon', '9999999999d'],
      ['--replay-horizon', '0d'],
    ] as const) {
      const other = flag === '--older-than' ? ['--replay-horizon', '1d'] : ['--older-than', '30d'];
      const prune = await run(['inbox', 'prune', flag, value, ...other, '--schema', SCHEMA]);
      expect(prune.code, `${flag} ${value}`).toBe(2);
      expect(expectOneErrorLine(prune)).toContain(
        `${flag} ${value} is out of range: give a duration from 1ms to 36500d`,
      );
    }
  });

  it('relay --relay-id with an empty or blank id is bad usage naming the flag', async () => {
    for (const id of ['', '  ']) {
      const started = start(
        ['relay', '--schema', SCHEMA, '--webhook', 'http://127.0.0.1:1/', '--relay-id', id],
        cliEnv({ TX_OUTBOX_WEBHOOK_SECRET: SECRET }),
      );
      // A relay that accepted the id runs until stopped.
      const timer = setTimeout(() => started.child.kill('SIGTERM'), 10_000);
      const result = await started.done;
      clearTimeout(timer);
      expect(result.code, result.stderr).toBe(2);
      expect(expectOneErrorLine(result)).toMatch(/--relay-id.*non-empty/);
    }
  });

  it('dead replay of one event id given twice (in either case) replays and counts it once', async () => {
    await run(['migrate', '--schema', SCHEMA, '--partitions', '4']);
    const { eventId } = await inTransaction(pool, (tx) =>
      enqueue(
        tx,
        { aggregateType: 'cli', aggregateId: 'dup', type: 'cli.dead', payload: {} },
        { schema: SCHEMA, notify: false },
      ),
    );
    await pool.query(`UPDATE "${SCHEMA}".events SET status = 'dead', dead_at = now() WHERE event_id = $1`, [
      eventId,
    ]);
    try {
      const result = await run([
        'dead',
        'replay',
        eventId,
        eventId.toUpperCase(),
        '--reason',
        'fixed',
        '--schema',
        SCHEMA,
      ]);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toBe('Replayed 1 dead event.\n');
      const { rows } = await pool.query(
        `SELECT event_ids FROM "${SCHEMA}".audit WHERE action = 'replay' AND $1 = ANY (event_ids)`,
        [eventId],
      );
      expect(rows).toEqual([{ event_ids: [eventId] }]);
    } finally {
      // Now pending again: the relay tests below count what they deliver from this schema.
      await pool.query(`DELETE FROM "${SCHEMA}".events WHERE event_id = $1`, [eventId]);
    }
  });

  it('says how to give the database when there is no URL', async () => {
    const result = await run(['status'], cliEnv({ DATABASE_URL: undefined }));
    expect(result.code).toBe(2);
    expect(expectOneErrorLine(result)).toMatch(/--database-url.*DATABASE_URL/);
  });

  it('relay delivers enqueued events to a webhook, and SIGTERM stops it and releases its partitions', async () => {
    await migrate(pool, { schema: SCHEMA, partitions: 4 });
    const receiver = await startReceiver();
    try {
      await inTransaction(pool, (tx) =>
        enqueue(
          tx,
          Array.from({ length: 20 }, (_, i) => ({
            aggregateType: 'order',
            aggregateId: `o-${i % 3}`,
            type: 'order.placed',
            payload: { i },
          })),
          { schema: SCHEMA },
        ),
      );
      const relay = start([
        'relay',
        '--schema',
        SCHEMA,
        '--webhook',
        receiver.url,
        '--webhook-secret',
        SECRET,
        '--poll-interval',
        '100',
        '--lease',
        '3000',
        '--relay-id',
        'cli-test-relay',
      ]);
      await waitFor(() => receiver.ids.size === 20, { what: '20 webhook deliveries', timeoutMs: 15_000 });
      expect(receiver.badSignatures).toBe(0);
      const running = await outboxStatus(pool, { schema: SCHEMA });
      expect(running.partitions.every((p) => p.owner === 'cli-test-relay')).toBe(true);
      expect(running.relays.map((r) => r.relayId)).toEqual(['cli-test-relay']);

      const stoppedAt = Date.now();
      relay.child.kill('SIGTERM');
      const result = await relay.done;
      expect(Date.now() - stoppedAt).toBeLessThan(5000);
      expect(result.code).toBe(0);
      expect(result.stderr).toMatch(/"msg":"tx-outbox relay started"/);
      expect(result.stderr).toMatch(/"msg":"tx-outbox relay stopped"/);
      expect(result.stderr).toMatch(/"published":20/);

      const after = await outboxStatus(pool, { schema: SCHEMA });
      expect(after.pending).toBe(0);
      expect(after.partitions.every((p) => p.owner === null)).toBe(true);
      expect(after.relays).toEqual([]);
    } finally {
      await receiver.close();
    }
  });

  it('relay --config routes events by type to several publishers', async () => {
    const schema = `${SCHEMA}_cfg`;
    await migrate(pool, { schema, partitions: 2 });
    const orders = await startReceiver();
    const others = await startReceiver();
    const dir = mkdtempSync(join(tmpdir(), 'txo-cli-'));
    const file = join(dir, 'tx-outbox.config.json');
    writeFileSync(
      file,
      JSON.stringify({
        publishers: {
          orders: { kind: 'webhook', url: orders.url, secret: SECRET },
          others: { kind: 'webhook', url: others.url, secret: SECRET },
        },
        routes: [{ match: { type: 'order.*' }, to: 'orders' }],
        default: 'others',
      }),
    );
    try {
      const ids = await inTransaction(pool, (tx) =>
        enqueue(
          tx,
          [
            { aggregateType: 'order', aggregateId: 'o1', type: 'order.placed', payload: 1 },
            { aggregateType: 'user', aggregateId: 'u1', type: 'user.created', payload: 2 },
          ],
          { schema },
        ),
      );
      const relay = start(['relay', '--schema', schema, '--config', file, '--poll-interval', '100']);
      await waitFor(() => orders.ids.size === 1 && others.ids.size === 1, { what: 'routed deliveries' });
      expect([...orders.ids]).toEqual([ids[0]!.eventId]);
      expect([...others.ids]).toEqual([ids[1]!.eventId]);
      relay.child.kill('SIGTERM');
      expect((await relay.done).code).toBe(0);
    } finally {
      await orders.close();
      await others.close();
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a config naming an unknown publisher is bad usage, naming the field', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'txo-cli-'));
    const file = join(dir, 'tx-outbox.config.json');
    writeFileSync(
      file,
      JSON.stringify({
        publishers: { a: { kind: 'redis', url: 'redis://127.0.0.1:6379' } },
        routes: [{ match: { type: 'x' }, to: 'missing' }],
      }),
    );
    try {
      const result = await run(['relay', '--schema', SCHEMA, '--config', file]);
      expect(result.code).toBe(2);
      expect(expectOneErrorLine(result)).toMatch(/routes\.0\.to: no publisher named "missing"/);
      const both = await run(['relay', '--schema', SCHEMA, '--redis', 'redis://x', '--kafka', 'k:1']);
      expect(both.code).toBe(2);
      expect(expectOneErrorLine(both)).toMatch(/choose one publisher/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('demo against DATABASE_URL ends with RESULT: OK, applies each committed event once despite the injected duplicates, and drops its schema', async () => {
    const result = await run(['demo', '--duration', '4s', '--rate', '100']);
    expect(result.stdout).toMatch(/RESULT: OK/);
    expect(result.code).toBe(0);
    expect(result.stderr).not.toMatch(/MaxListenersExceededWarning/);
    const summary = demoSummary(result.stdout);
    // Every 20th publish loses its ack: the relay publishes it again, the receiver gets it twice.
    expect(summary.lostPublishAcks).toBeGreaterThan(0);
    expect(summary.rePublished).toBe(summary.lostPublishAcks);
    expect(summary.verifierDuplicates).toBe(summary.lostPublishAcks);
    const { inventory } = summary;
    expect(inventory.duplicates).toBe(summary.lostPublishAcks);
    expect(inventory.received).toBe(inventory.processed + inventory.duplicates);
    expect(inventory.processed).toBe(summary.committed);
    expect(inventory.effects).toBe(summary.committed);
    expect(inventory.committedEvents).toBe(summary.committed);
    expect(result.stdout).toMatch(
      new RegExp(
        `effects per event: ${summary.committed} committed events once, 0 twice or more, 0 for events not committed;`,
      ),
    );
    expect(result.stdout).toMatch(/; 0 quarantined\n/);
    const schema = /schema "(txo_demo_[0-9a-f]+)"/.exec(result.stdout)?.[1];
    expect(schema).toBeDefined();
    const { rows } = await pool.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
    expect(rows).toHaveLength(0);
  });

  it('demo with --lost-acks 0 injects nothing and sees no duplicate', async () => {
    const result = await run(['demo', '--duration', '2s', '--rate', '100', '--lost-acks', '0']);
    expect(result.stdout).toMatch(/RESULT: OK/);
    expect(result.stdout).toMatch(/injected {5}nothing/);
    const { committed, verifierDuplicates, inventory } = demoSummary(result.stdout);
    expect(verifierDuplicates).toBe(0);
    expect(inventory).toEqual({
      received: committed,
      processed: committed,
      duplicates: 0,
      effects: committed,
      committedEvents: committed,
    });
  });

  it("demo --nats: JetStream drops the re-publishes, the inventory gets the nak'd deliveries again, one effect each", async () => {
    const result = await run(['demo', '--nats', NATS_URL, '--duration', '3s', '--rate', '100']);
    expect(result.stdout).toMatch(/RESULT: OK/);
    expect(result.code).toBe(0);
    const summary = demoSummary(result.stdout);
    expect(summary.lostPublishAcks).toBeGreaterThan(0);
    expect(summary.verifierDuplicates).toBe(0);
    expect(result.stdout).toMatch(
      new RegExp(`stream {7}holds ${summary.committed} messages for ${summary.committed} committed events`),
    );
    const lostConsumerAcks = Number(/(\d+) lost consumer acks/.exec(result.stdout)?.[1]);
    expect(lostConsumerAcks).toBeGreaterThan(0);
    const { inventory } = summary;
    expect(inventory.duplicates).toBe(lostConsumerAcks);
    expect(inventory.effects).toBe(summary.committed);
    expect(inventory.committedEvents).toBe(summary.committed);
  });

  it.each([
    ['drizzle', /^orm: Drizzle ORM \d+\.\d+\.\d+ \(drizzle-orm\/node-postgres\)/m],
    ['prisma', /^orm: Prisma \d+\.\d+\.\d+ \(the demo's generated client, @prisma\/adapter-pg\)/m],
  ])(
    "demo --orm %s: the ORM's transactions carry the guarantee, each committed event applied once",
    async (orm, intro) => {
      const result = await run(['demo', '--orm', orm, '--duration', '2s', '--rate', '50']);
      expect(result.stdout).toMatch(intro);
      expect(result.stdout).toMatch(/RESULT: OK/);
      expect(result.code).toBe(0);
      const summary = demoSummary(result.stdout);
      expect(summary.committed).toBeGreaterThan(0);
      expect(result.stdout).toMatch(/order per aggregate held: yes/);
      expect(result.stdout).toMatch(/\n {2}rolled back {2}\d+ = delivered 0 of them\n/);
      const { inventory } = summary;
      expect(inventory.processed).toBe(summary.committed);
      expect(inventory.duplicates).toBe(summary.lostPublishAcks);
      expect(inventory.effects).toBe(summary.committed);
      expect(inventory.committedEvents).toBe(summary.committed);
      expect(result.stdout).toMatch(/; 0 quarantined\n/);
    },
  );

  it('demo --orm: an unknown name is refused naming the choices; drizzle and prisma load only when chosen', async () => {
    const unknown = await run(['demo', '--orm', 'sequelize']);
    expect(unknown.code).toBe(2);
    expect(expectOneErrorLine(unknown)).toMatch(
      /'--orm <name>' argument 'sequelize' is invalid\. Allowed choices are pg, drizzle, prisma/,
    );
    // A resolve hook that hides the ORMs, as on a machine where they are not installed.
    const dir = mkdtempSync(join(tmpdir(), 'txo-no-orm-'));
    try {
      writeFileSync(
        join(dir, 'hooks.mjs'),
        `export async function resolve(specifier, context, next) {
  if (/^(drizzle-orm|prisma|@prisma\\/)/.test(specifier)) {
    throw Object.assign(new Error(\`Cannot find package '\${specifier}'\`), { code: 'ERR_MODULE_NOT_FOUND' });
  }
  return next(specifier, context);
}\n`,
      );
      writeFileSync(
        join(dir, 'register.mjs'),
        "import { register } from 'node:module';\nregister('./hooks.mjs', import.meta.url);\n",
      );
      const env = cliEnv({ NODE_OPTIONS: `--import ${join(dir, 'register.mjs')}` });
      const help = await run(['demo', '--help'], env);
      expect(help.code, help.stderr).toBe(0);
      expect(help.stdout).toMatch(/--orm <name>/);
      const missing = await run(['demo', '--orm', 'drizzle', '--duration', '1s'], env);
      expect(missing.code).toBe(1);
      expect(expectOneErrorLine(missing)).toMatch(
        /the demo's --orm drizzle needs drizzle-orm, not installed here/,
      );
      const noPrisma = await run(['demo', '--orm', 'prisma', '--duration', '1s'], env);
      expect(noPrisma.code).toBe(1);
      expect(expectOneErrorLine(noPrisma)).toMatch(
        /the demo's --orm prisma needs prisma @prisma\/client @prisma\/adapter-pg, not installed here/,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

interface DemoSummary {
  readonly committed: number;
  readonly lostPublishAcks: number;
  readonly rePublished: number;
  readonly verifierDuplicates: number;
  readonly inventory: {
    readonly received: number;
    readonly processed: number;
    readonly duplicates: number;
    readonly effects: number;
    readonly committedEvents: number;
  };
}

/** The numbers of the demo's summary lines; a line that is missing fails the test. */
function demoSummary(stdout: string): DemoSummary {
  const match = (pattern: RegExp): number[] => {
    const found = pattern.exec(stdout);
    if (!found) throw new Error(`no line matching ${pattern} in the demo's output:\n${stdout.slice(-3000)}`);
    return found.slice(1).map(Number);
  };
  const [committed, delivered] = match(/\n {2}committed {4}(\d+) = delivered (\d+) \(unique\)/);
  expect(delivered).toBe(committed);
  const injected = /\n {2}injected {5}(\d+) lost publish acks \(\d+%\).*\((\d+) re-published\)/.exec(stdout);
  const [received, processed, duplicates, effects, committedEvents] = match(
    /\n {2}inventory {4}received (\d+) deliveries: (\d+) processed, (\d+) duplicates \(no effect\)(?:, \d+ \w+)*, effects applied (\d+) = committed events (\d+)\n/,
  );
  return {
    committed: committed!,
    lostPublishAcks: Number(injected?.[1] ?? 0),
    rePublished: Number(injected?.[2] ?? 0),
    verifierDuplicates: match(/\n {2}duplicates {3}(\d+) /)[0]!,
    inventory: {
      received: received!,
      processed: processed!,
      duplicates: duplicates!,
      effects: effects!,
      committedEvents: committedEvents!,
    },
  };
}

interface Receiver {
  readonly url: string;
  readonly ids: Set<string>;
  badSignatures: number;
  close(): Promise<void>;
}

/** A webhook endpoint that checks signatures and records event ids. */
async function startReceiver(): Promise<Receiver> {
  const receiver = { ids: new Set<string>(), badSignatures: 0 };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      if (!verifyWebhook({ secret: SECRET, headers: req.headers, body: Buffer.concat(chunks) })) {
        receiver.badSignatures += 1;
        res.writeHead(401).end();
        return;
      }
      receiver.ids.add(String(req.headers['webhook-id']));
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return Object.assign(receiver, {
    url: `http://127.0.0.1:${port}/hooks`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  });
}
