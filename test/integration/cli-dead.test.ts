/** `tx-outbox dead list | show | replay | skip`, run as users run it (the built CLI). */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import { createTestDb, inTransaction, type TestDb } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { collectOutput, type ProcessRun } from '../helpers/processes.js';

const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

let db: TestDb;
beforeAll(async () => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  db = await createTestDb('cli_dead', { partitions: 2 });
});
afterAll(async () => {
  await db?.close();
});

function run(args: readonly string[]): Promise<ProcessRun> {
  const child = spawn(process.execPath, [CLI, ...args, '--schema', db.schema], {
    env: { ...process.env, DATABASE_URL },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return collectOutput(child).done;
}

/** Enqueues the events and marks them all dead, as the relay would. */
async function putDead(events: OutboxEvent[]): Promise<string[]> {
  const results = await inTransaction(db.pool, (tx) =>
    enqueue(tx, events, { schema: db.schema, notify: false }),
  );
  const ids = results.map((r) => r.eventId);
  await db.pool.query(
    `UPDATE "${db.schema}".events SET status = 'dead', dead_at = now(), attempts = 3, last_error = 'permanent: refused'
     WHERE event_id = ANY ($1::uuid[])`,
    [ids],
  );
  return ids;
}

async function statusOf(eventId: string): Promise<string | undefined> {
  const { rows } = await db.pool.query(
    `SELECT status, event_type FROM "${db.schema}".events WHERE event_id = $1`,
    [eventId],
  );
  return rows[0] ? `${rows[0].status} ${rows[0].event_type}` : undefined;
}

describe('tx-outbox dead', () => {
  it('list filters by aggregate, type and since; show prints the row and its audit history', async () => {
    const [a, b, c] = await putDead([
      {
        aggregateType: 'order',
        aggregateId: 'c1',
        type: 'order.placed',
        payload: { n: 1 },
        headers: { h: 'v' },
      },
      { aggregateType: 'order', aggregateId: 'c2', type: 'order.paid', payload: { n: 2 } },
      { aggregateType: 'cart', aggregateId: 'c1', type: 'cart.added', payload: { n: 3 } },
    ]);
    const ids = async (...flags: string[]) => {
      const r = await run(['dead', 'list', '--json', ...flags]);
      expect(r.code, r.stderr).toBe(0);
      return (JSON.parse(r.stdout) as { eventId: string }[]).map((e) => e.eventId).sort();
    };
    expect(await ids('--aggregate', 'order/c1')).toEqual([a]);
    expect(await ids('--aggregate-id', 'c1')).toEqual([a, c].sort());
    expect(await ids('--type', 'order.paid')).toEqual([b]);
    expect(await ids('--since', '1h')).toEqual([a, b, c].sort());
    expect(await ids('--since', '2999-01-01T00:00Z')).toEqual([]);
    const bad = await run(['dead', 'list', '--since', 'yesterday']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--since needs an ISO time/);

    const shown = await run(['dead', 'show', a!]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain(`${a}  (row `);
    expect(shown.stdout).toMatch(/aggregate\s+order\/c1\s+sequence 1/);
    expect(shown.stdout).toMatch(/status\s+dead since .* after 3 attempts/);
    expect(shown.stdout).toMatch(/last error\s+permanent: refused/);
    expect(shown.stdout).toContain('headers     {"h":"v"}');
    expect(shown.stdout).toMatch(/payload\s+\d+ bytes: \{"n": 1\}/);
    expect(shown.stdout).toContain('audit: none');
    const json = await run(['dead', 'show', a!, '--json']);
    expect(JSON.parse(json.stdout)).toMatchObject({ event: { eventId: a, status: 'dead' }, audit: [] });
    const missing = await run(['dead', 'show', randomUUID()]);
    expect(missing.code).toBe(3);
    expect(missing.stderr).toMatch(/no event .* in the outbox table or the audit trail/);
  });

  it('replay --all needs a filter, counts first, and --dry-run lists and changes nothing', async () => {
    const [x, y] = await putDead([
      { aggregateType: 'invoice', aggregateId: 'r1', type: 'invoice.sent', payload: 1 },
      { aggregateType: 'invoice', aggregateId: 'r2', type: 'invoice.sent', payload: 2 },
    ]);
    const dry = await run([
      'dead',
      'replay',
      '--all',
      '--aggregate-type',
      'invoice',
      '--reason',
      'fixed',
      '--dry-run',
    ]);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(/^2 dead events match; dry run, nothing changed\n/);
    expect(dry.stdout).toContain(x);
    expect(dry.stdout).toContain(y);
    expect(await statusOf(x!)).toBe('dead invoice.sent');
    const withIds = await run(['dead', 'replay', x!, '--type', 'invoice.sent', '--reason', 'fixed']);
    expect(withIds.code).toBe(2);
    const dryIds = await run(['dead', 'replay', x!, '--reason', 'fixed', '--dry-run']);
    expect(dryIds.stdout).toBe(`Would replay 1 dead event. Dry run: nothing changed.\n${x}\n`);
    expect(await statusOf(x!)).toBe('dead invoice.sent');
    const real = await run([
      'dead',
      'replay',
      '--all',
      '--aggregate',
      'invoice/r1',
      '--reason',
      'fixed',
      '--actor',
      'dana',
    ]);
    expect(real.stdout).toBe('1 dead event matches; replaying\nReplayed 1 dead event.\n');
    expect(await statusOf(x!)).toBe('pending invoice.sent');
    expect(await statusOf(y!)).toBe('dead invoice.sent');
  });

  it('skip: a reason required, --dry-run, not-found ids reported, pending refused, --no-publish removes', async () => {
    const [s1, s2] = await putDead([
      { aggregateType: 'ship', aggregateId: 's1', type: 'ship.sent', payload: 1 },
      { aggregateType: 'ship', aggregateId: 's2', type: 'ship.sent', payload: 2 },
    ]);
    const noReason = await run(['dead', 'skip', s1!]);
    expect(noReason.code).toBe(2);
    expect(noReason.stderr).toMatch(/--reason/);
    const dry = await run(['dead', 'skip', s1!, '--reason', 'refunded', '--dry-run']);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(/^Would skip 1 dead event: a skip marker .* Dry run: nothing changed\.\n/);
    expect(await statusOf(s1!)).toBe('dead ship.sent');

    const gone = randomUUID();
    const skipped = await run(['dead', 'skip', s1!, gone, '--reason', 'refunded', '--actor', 'erin']);
    // The dead one is skipped; the unknown id is named, and exit 3 tells a script.
    expect(skipped.code, skipped.stderr).toBe(3);
    expect(skipped.stdout).toContain('Skipped 1 dead event: a skip marker takes the place of each');
    expect(skipped.stderr).toBe(
      `tx-outbox: 1 given id(s) not skipped, not found (delivered, skipped before, or never there); see tx-outbox event <id>: ${gone}\n`,
    );
    expect(await statusOf(s1!)).toBe('pending tx-outbox.skipped');

    // The marker is pending now: skipping it again is refused, with nothing changed.
    const again = await run(['dead', 'skip', s1!, s2!, '--reason', 'twice']);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/is pending, not dead/);
    expect(await statusOf(s2!)).toBe('dead ship.sent');

    const removed = await run(['dead', 'skip', s2!, '--reason', 'queue deleted', '--no-publish']);
    expect(removed.code, removed.stderr).toBe(0);
    expect(removed.stdout).toContain('removed without a marker');
    expect(await statusOf(s2!)).toBeUndefined();
    const shown = await run(['dead', 'show', s2!]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain('not in the outbox table');
    expect(shown.stdout).toMatch(
      /skip-unpublished by .*: queue deleted\n\s+original: ship\.sent v1, payload 2/,
    );
  });
});

describe('ids that name nothing: exit 3, a clear message, the other ids still done', () => {
  it('dead replay: an unknown id and a pending one exit 3 naming them (dry run too); all found exits 0', async () => {
    const [dead] = await putDead([
      { aggregateType: 'typo', aggregateId: 't1', type: 'typo.made', payload: 1 },
    ]);
    const unknown = randomUUID();
    const only = await run(['dead', 'replay', unknown, '--reason', 'typo']);
    expect(only.code, only.stderr).toBe(3);
    expect(only.stdout).toBe('Replayed 0 dead events; 1 given id(s) were not dead.\n');
    expect(only.stderr).toBe(
      `tx-outbox: 1 given id(s) not replayed, not dead (pending, delivered, resolved before, or never there); see tx-outbox event <id>: ${unknown}\n`,
    );

    const dry = await run(['dead', 'replay', dead!, unknown, '--reason', 'typo', '--dry-run']);
    expect(dry.code, dry.stderr).toBe(3);
    expect(dry.stdout).toBe(
      `Would replay 1 dead event; 1 given id(s) were not dead. Dry run: nothing changed.\n${dead}\n`,
    );
    expect(dry.stderr).toContain(unknown);
    expect(await statusOf(dead!)).toBe('dead typo.made');

    const mixed = await run(['dead', 'replay', dead!, unknown, '--reason', 'typo']);
    expect(mixed.code, mixed.stderr).toBe(3);
    expect(mixed.stdout).toBe('Replayed 1 dead event; 1 given id(s) were not dead.\n');
    expect(await statusOf(dead!)).toBe('pending typo.made');
    // Now pending, so not dead: replaying it again is no silent success either.
    const again = await run(['dead', 'replay', dead!, '--reason', 'twice']);
    expect(again.code).toBe(3);
    expect(again.stderr).toContain(dead);

    const [other] = await putDead([
      { aggregateType: 'typo', aggregateId: 't2', type: 'typo.made', payload: 2 },
    ]);
    const ok = await run(['dead', 'replay', other!, '--reason', 'fixed']);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stderr).toBe('');
  });

  it('dead skip: only unknown ids exit 3 and change nothing', async () => {
    const unknown = randomUUID();
    const result = await run(['dead', 'skip', unknown, '--reason', 'typo']);
    expect(result.code, result.stderr).toBe(3);
    expect(result.stdout).toMatch(/^Skipped 0 dead events/);
    expect(result.stderr).toContain(`not skipped, not found`);
    expect(result.stderr).toContain(unknown);
    const dry = await run(['dead', 'skip', unknown, '--reason', 'typo', '--dry-run']);
    expect(dry.code).toBe(3);
  });

  it('inbox show and release: an unknown id exits 3; release still releases the ids that exist', async () => {
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO "${db.schema}".inbox_quarantine (consumer, event_id, aggregate_type, aggregate_id, sequence,
         event_type, schema_version, headers, payload, reason, attempts)
       VALUES ('billing', $1, 'order', 'q1', 1, 'order.placed', 1, '{}', 'x', 'handler failed', 3)
       RETURNING id::text AS id`,
      [randomUUID()],
    );
    const id = rows[0]!.id;
    const unknown = String(BigInt(id) + 1000n);
    const shown = await run(['inbox', 'show', unknown]);
    expect(shown.code).toBe(3);
    expect(shown.stderr).toBe(`tx-outbox: no quarantined message with id ${unknown} (see inbox list)\n`);
    expect((await run(['inbox', 'show', id])).code).toBe(0);

    const onlyUnknown = await run(['inbox', 'release', unknown, '--reason', 'typo']);
    expect(onlyUnknown.code).toBe(3);
    expect(onlyUnknown.stdout).toBe(
      'Released 0 message(s); the consumer replays them (inbox.replayReleased).\n',
    );
    expect(onlyUnknown.stderr).toBe(
      `tx-outbox: 1 given id(s) not released: no such quarantined message, or released before (see inbox list): ${unknown}\n`,
    );
    const mixed = await run(['inbox', 'release', id, unknown, '--reason', 'fixed']);
    expect(mixed.code).toBe(3);
    expect(mixed.stdout).toMatch(/^Released 1 message\(s\)/);
    expect(mixed.stderr).toBe(onlyUnknown.stderr);
    // Released already: releasing it again is no silent success.
    const again = await run(['inbox', 'release', id, '--reason', 'twice']);
    expect(again.code).toBe(3);
    expect(again.stderr).toMatch(new RegExp(`released before \\(see inbox list\\): ${id}\n$`));
  });
});
