import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveCdcNames } from '../../src/cdc/setup.js';
import { enqueue } from '../../src/producer/enqueue.js';
import { inTransaction, waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { type CollectedProcess, collectOutput, type ProcessRun } from '../helpers/processes.js';
import { dropSlotQuietly, holdSlot } from '../helpers/slot-holder.js';

// The built CLI, as users run it (run `npm run build` before this file alone).
const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
const CDC_RELAY = fileURLToPath(new URL('../../dist/cdc/relay.js', import.meta.url));
const SCHEMA = `cdc_control_cli_${randomBytes(4).toString('hex')}`;
const PUB = `txo_${SCHEMA}`;
/** This database's default slot of SCHEMA (resolved in beforeAll). */
let SLOT: string;
const SECRET = `whsec_${randomBytes(24).toString('base64')}`;

let pool: pg.Pool;
const children: ChildProcess[] = [];

beforeAll(async () => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
  SLOT = (await resolveCdcNames(pool, { schema: SCHEMA })).slot;
});

afterAll(async () => {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const slot of [SLOT, `${SLOT}_b`]) await dropSlotQuietly(pool, slot);
  for (const pub of [PUB, `${PUB}_b`]) await pool.query(`DROP PUBLICATION IF EXISTS "${pub}"`);
  await pool.query(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
  await pool.end();
});

function start(args: readonly string[], env: NodeJS.ProcessEnv = {}): CollectedProcess {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...process.env, DATABASE_URL, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  return collectOutput(child);
}

const run = (args: readonly string[], env?: NodeJS.ProcessEnv): Promise<ProcessRun> => start(args, env).done;

async function slotExists(slot: string): Promise<boolean> {
  const { rowCount } = await pool.query('SELECT 1 FROM pg_replication_slots WHERE slot_name = $1', [slot]);
  return rowCount === 1;
}

describe('tx-outbox migrate --cdc, cdc status, status, cdc drop-slot', () => {
  it('migrate --cdc creates the slot and the publication, once', async () => {
    const first = await run(['migrate', '--schema', SCHEMA, '--partitions', '4', '--cdc']);
    expect(first.stderr).toBe('');
    expect(first.code).toBe(0);
    expect(first.stdout).toMatch(/011_cdc/);
    expect(first.stdout).toContain(`Created replication slot "${SLOT}" and publication "${PUB}"`);
    expect(await slotExists(SLOT)).toBe(true);
    const again = await run(['migrate', '--schema', SCHEMA, '--cdc']);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain(`Kept the existing replication slot "${SLOT}"`);
    const bad = await run(['migrate', '--schema', SCHEMA, '--slot', 'x']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--slot and --publication need --cdc/);
  });

  it('cdc status prints the slot (text and JSON); tx-outbox status adds the CDC lines', async () => {
    const text = await run(['cdc', 'status', '--schema', SCHEMA]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(new RegExp(`slot +${SLOT} +\\(wal_status reserved\\)`));
    expect(text.stdout).toMatch(/streaming +no/);
    expect(text.stdout).toMatch(/confirmed LSN +[0-9A-F]+\/[0-9A-F]+/);
    expect(text.stdout).toMatch(/WAL retained +\d/);
    const json = await run(['cdc', 'status', '--schema', SCHEMA, '--json']);
    const parsed = JSON.parse(json.stdout) as Record<string, unknown>;
    expect(parsed).toMatchObject({
      schema: SCHEMA,
      slot: SLOT,
      exists: true,
      active: false,
      walStatus: 'reserved',
    });
    expect(typeof parsed['lagBytes']).toBe('number');

    const status = await run(['status', '--schema', SCHEMA]);
    expect(status.code).toBe(0);
    expect(status.stdout).toMatch(/\nCDC\n {2}slot +txo_/);
    const statusJson = JSON.parse((await run(['status', '--schema', SCHEMA, '--json'])).stdout) as {
      cdc?: { slot: string };
    };
    expect(statusJson.cdc?.slot).toBe(SLOT);
    // A schema without a slot: no CDC section.
    const other = await run(['status', '--schema', SCHEMA, '--slot', 'txo_none_here']);
    expect(other.stdout).not.toMatch(/\nCDC\n/);
    const none = await run(['cdc', 'status', '--schema', SCHEMA, '--slot', 'txo_none_here']);
    expect(none.stdout).toMatch(/none \(tx-outbox migrate --cdc creates it\)/);
  });

  it('drop-slot refuses without --yes, refuses an active slot, then drops slot and publication', async () => {
    const refused = await run(['cdc', 'drop-slot', '--schema', SCHEMA]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/drop-slot needs --yes: WAL-mode events .* are lost/);
    expect(await slotExists(SLOT)).toBe(true);

    const holder = await holdSlot(pool, SLOT, PUB);
    const busy = await run(['cdc', 'drop-slot', '--schema', SCHEMA, '--yes']);
    expect(busy.code).toBe(1);
    expect(busy.stderr).toMatch(new RegExp(`in use by the walsender PID ${holder.pid}`));
    expect(await slotExists(SLOT)).toBe(true);
    await holder.close();
    await waitFor(
      async () =>
        (await pool.query('SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND NOT active', [SLOT]))
          .rowCount === 1,
      { what: 'slot released' },
    );

    const dropped = await run(['cdc', 'drop-slot', '--schema', SCHEMA, '--yes']);
    expect(dropped.code).toBe(0);
    expect(dropped.stdout).toContain(`Dropped replication slot "${SLOT}"; dropped publication "${PUB}".`);
    expect(await slotExists(SLOT)).toBe(false);
    const pubs = await pool.query('SELECT 1 FROM pg_publication WHERE pubname = $1', [PUB]);
    expect(pubs.rowCount).toBe(0);
  });
});

interface Received {
  readonly url: string;
  readonly sources: string[];
  close(): Promise<void>;
}

async function receiver(): Promise<Received> {
  const sources: string[] = [];
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      sources.push(String(req.headers['ce-source']));
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    sources,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Starts a relay, enqueues one event, returns the CloudEvents source it arrived with and the stderr. */
async function deliverOne(flags: readonly string[]): Promise<{ source: string; stderr: string }> {
  const hook = await receiver();
  const relay = start(
    ['relay', '--schema', SCHEMA, '--webhook', hook.url, '--poll-interval', '50', ...flags],
    {
      TX_OUTBOX_WEBHOOK_SECRET: SECRET,
    },
  );
  try {
    await waitFor(() => /tx-outbox relay started/.test(relay.stderr()), { what: 'relay started' });
    await inTransaction(pool, (tx) =>
      enqueue(
        tx,
        { aggregateType: 'a', aggregateId: randomBytes(4).toString('hex'), type: 't', payload: {} },
        {
          schema: SCHEMA,
        },
      ),
    );
    await waitFor(() => hook.sources.length > 0, { what: 'the webhook delivery' });
    relay.child.kill('SIGTERM');
    const done = await relay.done;
    return { source: hook.sources[0]!, stderr: done.stderr };
  } finally {
    await hook.close();
  }
}

describe('relay --source / --ce-source', () => {
  it('--source https://x still sets the CloudEvents source, with a deprecation warning', async () => {
    const { source, stderr } = await deliverOne(['--source', 'https://orders.example.com']);
    expect(source).toBe('https://orders.example.com');
    expect(stderr).toMatch(
      /DeprecationWarning: --source <uri> for the CloudEvents source is deprecated, use --ce-source/,
    );
  });

  it('--ce-source sets it without a warning', async () => {
    const { source, stderr } = await deliverOne(['--ce-source', 'https://billing.example.com']);
    expect(source).toBe('https://billing.example.com');
    expect(stderr).not.toMatch(/DeprecationWarning/);
  });

  it('--source poll is the polling relay; bad combinations are one usage error', async () => {
    const { stderr } = await deliverOne(['--source', 'poll']);
    expect(stderr).toMatch(/"source":"poll"/);
    const both = await run([
      'relay',
      '--schema',
      SCHEMA,
      '--webhook',
      'http://127.0.0.1:1/',
      '--source',
      'urn:a',
      '--ce-source',
      'urn:b',
    ]);
    expect(both.code).toBe(2);
    expect(both.stderr).toMatch(/deprecated spelling of --ce-source, which is given too/);
    const cdcFlag = await run([
      'relay',
      '--schema',
      SCHEMA,
      '--webhook',
      'http://127.0.0.1:1/',
      '--slot',
      's',
    ]);
    expect(cdcFlag.code).toBe(2);
    expect(cdcFlag.stderr).toMatch(/--slot need --source cdc/);
    const silence = await run([
      'relay',
      '--schema',
      SCHEMA,
      '--webhook',
      'http://127.0.0.1:1/',
      '--source',
      'cdc',
      '--heartbeat',
      '30s',
      '--silence-timeout',
      '10s',
    ]);
    expect(silence.code).toBe(2);
    expect(silence.stderr).toMatch(
      /--silence-timeout \(10000 ms\) must be longer than --heartbeat \(30000 ms\)/,
    );
  });

  it('--source cdc selects the CDC relay', async () => {
    const hook = await receiver();
    const slot = `${SLOT}_b`;
    const publication = `${PUB}_b`;
    const relay = start(
      [
        'relay',
        '--schema',
        SCHEMA,
        '--webhook',
        hook.url,
        '--source',
        'cdc',
        '--slot',
        slot,
        '--publication',
        publication,
        '--heartbeat',
        '1s',
        '--silence-timeout',
        '5s',
      ],
      { TX_OUTBOX_WEBHOOK_SECRET: SECRET },
    );
    try {
      if (existsSync(CDC_RELAY)) {
        await waitFor(() => /tx-outbox relay started/.test(relay.stderr()), { what: 'CDC relay started' });
        expect(relay.stderr()).toMatch(new RegExp(`"source":"cdc","slot":"${slot}"`));
        relay.child.kill('SIGTERM');
        expect((await relay.done).code).toBe(0);
      } else {
        // This build has no CDC relay yet: the CLI says so, in one line, instead of running a polling relay.
        const done = await relay.done;
        expect(done.code).toBe(1);
        expect(done.stderr).toMatch(/this build of tx-outbox has no CDC relay/);
        expect(done.stderr).not.toMatch(/tx-outbox relay started/);
      }
    } finally {
      await hook.close();
    }
  });
});
