/**
 * Failure tests of the list, on the real PostgreSQL and real NATS servers:
 * broker down while events commit, kill -9 between publish and outcome, a relay
 * paused past its lease (fencing), and two relay processes sharing partitions.
 * Relay processes run the built package (test/failure/fixtures/relay-process.mjs).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import { natsPublisher } from '../../src/publishers/nats/index.js';
import { createRelay, type Relay } from '../../src/relay/polling/relay.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { DATABASE_URL, NATS_URL } from '../helpers/env.js';
import { deleteStream, orderViolations, readStream, watchSubjects } from '../helpers/nats-stream.js';
import { exited, PrivateNats } from '../helpers/processes.js';

const FIXTURE = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'relay-process.mjs');

let db: TestDb;
const children: ChildProcess[] = [];
const relays: Relay[] = [];
const cleanups: Array<() => Promise<void>> = [];

beforeAll(async () => {
  db = await createTestDb('failure');
});
afterEach(async () => {
  for (const c of children.splice(0)) {
    c.kill('SIGCONT');
    c.kill('SIGKILL');
    await exited(c);
  }
  await Promise.all(relays.splice(0).map((r) => r.stop({ timeout: 2000 })));
  for (const f of cleanups.splice(0)) await f();
  await db.pool.query(`DELETE FROM "${db.schema}".events`);
  await db.pool.query(`DELETE FROM "${db.schema}".aggregate_sequences`);
  await db.pool.query(`DELETE FROM "${db.schema}".aggregate_progress`);
  await db.pool.query(`UPDATE "${db.schema}".partitions SET owner = NULL, lease_until = '-infinity'`);
  await db.pool.query(`DELETE FROM "${db.schema}".relays`);
});
afterAll(async () => {
  await db?.close();
});

function names(): { stream: string; prefix: string } {
  const tag = randomBytes(4).toString('hex');
  return { stream: `TXO_FAIL_${tag}`, prefix: `fail${tag}` };
}

async function put(events: OutboxEvent[]): Promise<void> {
  for (let i = 0; i < events.length; i += 1000) {
    await inTransaction(db.pool, (tx) => enqueue(tx, events.slice(i, i + 1000), { schema: db.schema }));
  }
}

function events(prefix: string, count: number, aggregates: number, from = 0): OutboxEvent[] {
  return Array.from({ length: count }, (_, k) => {
    const i = from + k;
    return {
      aggregateType: 'order',
      aggregateId: `a${i % aggregates}`,
      type: 'order.changed',
      topic: `${prefix}.order`,
      payload: { i },
    };
  });
}

async function outboxRows(): Promise<Array<{ status: string; attempts: number }>> {
  const { rows } = await db.pool.query(`SELECT status, attempts FROM "${db.schema}".events`);
  return rows;
}

interface ChildOptions {
  mode: 'normal' | 'crash-after-publish' | 'slow-fail';
  stream: string;
  prefix: string;
  servers?: string;
  leaseMs?: number;
  delayMs?: number;
  relayId?: string;
  batchSize?: number;
}

function spawnRelay(o: ChildOptions): { child: ChildProcess; output: string[] } {
  const output: string[] = [];
  const config = {
    databaseUrl: DATABASE_URL,
    schema: db.schema,
    nats: { servers: o.servers ?? NATS_URL, stream: o.stream, subjects: [`${o.prefix}.>`] },
    leaseMs: o.leaseMs ?? 1500,
    mode: o.mode,
    delayMs: o.delayMs,
    relayId: o.relayId,
    batchSize: o.batchSize,
  };
  const child = spawn(process.execPath, [FIXTURE], {
    env: { ...process.env, TXO_FIXTURE: JSON.stringify(config) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  child.stdout!.setEncoding('utf8');
  let buffer = '';
  child.stdout!.on('data', (chunk: string) => {
    buffer += chunk;
    const lines = buffer.split('\n');
    buffer = lines.pop() ?? '';
    output.push(...lines);
  });
  children.push(child);
  return { child, output };
}

async function ownedBy(relayId: string): Promise<number> {
  const { rows } = await db.pool.query(
    `SELECT count(*)::int AS n FROM "${db.schema}".partitions WHERE owner = $1 AND lease_until > now()`,
    [relayId],
  );
  return rows[0].n;
}

describe('failure: the broker is down while events commit', () => {
  it('loses nothing, charges no attempts, and publishes everything once NATS is back', async () => {
    const nats = await PrivateNats.start();
    cleanups.push(() => nats.destroy());
    const { stream, prefix } = names();
    const publisher = natsPublisher({
      url: nats.url,
      stream,
      streamSubjects: [`${prefix}.>`],
      timeoutMs: 1000,
    });
    cleanups.push(() => publisher.close());
    const relay = createRelay({
      pool: db.pool,
      publisher,
      schema: db.schema,
      pollIntervalMs: 50,
      maxAttempts: 3,
    });
    relays.push(relay);
    await relay.start();

    await put(events(prefix, 20, 5));
    await waitFor(async () => (await outboxRows()).length === 0, { what: 'first events delivered' });

    await nats.down();
    await put(events(prefix, 500, 25, 20));
    await waitFor(() => relay.stats().unavailable > 0, { what: 'a refused publish' });
    await new Promise((r) => setTimeout(r, 1500));
    const during = await outboxRows();
    expect(during).toHaveLength(500);
    expect(during.every((r) => r.status === 'pending' && r.attempts === 0)).toBe(true);

    await nats.up();
    await waitFor(async () => (await outboxRows()).length === 0, {
      timeoutMs: 40_000,
      what: 'backlog delivered',
    });
    const stored = await readStream(nats.url, stream);
    expect(stored).toHaveLength(520);
    expect(new Set(stored.map((s) => s.eventId)).size).toBe(520);
    expect(orderViolations(stored)).toEqual([]);
    expect(relay.stats().dead).toBe(0);
  });
});

describe('failure: kill -9 after publish, before the outcome is recorded', () => {
  it('republishes the same event ids on restart; nothing is lost', async () => {
    const { stream, prefix } = names();
    cleanups.push(() => deleteStream(NATS_URL, stream));
    const watch = await watchSubjects(NATS_URL, `${prefix}.>`);
    cleanups.push(() => watch.close());
    await put(events(prefix, 5, 5));
    const ids = (await db.pool.query(`SELECT event_id::text AS id FROM "${db.schema}".events`)).rows.map(
      (r) => r.id,
    );

    const { child, output } = spawnRelay({ mode: 'crash-after-publish', stream, prefix });
    await exited(child);
    expect(child.signalCode).toBe('SIGKILL');
    expect(output.some((l) => l.includes('published; crashing'))).toBe(true);
    // Published, but the outcome never reached the database: still pending.
    expect(await outboxRows()).toHaveLength(5);

    const relay = createRelay({
      pool: db.pool,
      publisher: natsPublisher({ url: NATS_URL, stream }),
      schema: db.schema,
      pollIntervalMs: 50,
    });
    relays.push(relay);
    await relay.start();
    await waitFor(async () => (await outboxRows()).length === 0, { timeoutMs: 20_000, what: 'republish' });
    expect(relay.stats().published).toBe(5);

    // Each event went out twice with the same id; JetStream's dedup kept one copy.
    await waitFor(() => watch.seen.length >= 10, { what: 'both publishes observed' });
    for (const id of ids) expect(watch.seen.filter((s) => s === id)).toHaveLength(2);
    const stored = await readStream(NATS_URL, stream);
    expect(stored.map((s) => s.eventId).sort()).toEqual([...ids].sort());
  });
});

describe('failure: a relay paused past its lease (SIGSTOP) changes nothing', () => {
  it('its outcome for a batch claimed under the old epoch is fenced off', async () => {
    const { stream, prefix } = names();
    const relayId = `paused-${randomBytes(3).toString('hex')}`;
    await put(events(prefix, 40, 40));
    const { child, output } = spawnRelay({
      mode: 'slow-fail',
      stream,
      prefix,
      relayId,
      delayMs: 1500,
      leaseMs: 900,
    });
    await waitFor(() => output.some((l) => l.includes('batch in flight')), { what: 'a batch in flight' });
    child.kill('SIGSTOP');

    // While it sleeps, its leases expire and another owner takes every partition (epoch + 1).
    await new Promise((r) => setTimeout(r, 1200));
    const taken = await db.pool.query(
      `UPDATE "${db.schema}".partitions SET owner = 'thief', epoch = epoch + 1, lease_until = now() + interval '1 hour'
       WHERE lease_until < now() RETURNING partition`,
    );
    expect(taken.rowCount).toBe(16);

    child.kill('SIGCONT');
    // Its publisher now reports every message as a permanent failure; unfenced, they would all go dead.
    await waitFor(() => output.some((l) => l.includes('outcome fenced')), { what: 'the fenced outcome' });
    await new Promise((r) => setTimeout(r, 500));
    const rows = await outboxRows();
    expect(rows).toHaveLength(40);
    expect(rows.every((r) => r.status === 'pending' && r.attempts === 0)).toBe(true);
    const { rows: parts } = await db.pool.query(
      `SELECT count(*)::int AS n FROM "${db.schema}".partitions WHERE owner = 'thief'`,
    );
    expect(parts[0].n).toBe(16);
  });
});

describe('failure: two relay processes over 16 partitions', () => {
  it('share the work, survive one being paused past its lease, and keep per-aggregate order', async () => {
    const { stream, prefix } = names();
    cleanups.push(() => deleteStream(NATS_URL, stream));
    const a = spawnRelay({
      mode: 'normal',
      stream,
      prefix,
      relayId: 'relay-a',
      leaseMs: 1200,
      batchSize: 50,
    });
    spawnRelay({ mode: 'normal', stream, prefix, relayId: 'relay-b', leaseMs: 1200, batchSize: 50 });
    await waitFor(async () => (await ownedBy('relay-a')) === 8 && (await ownedBy('relay-b')) === 8, {
      what: 'an even split of partitions',
    });

    await put(events(prefix, 1500, 60));
    await waitFor(async () => (await outboxRows()).length < 1200, { what: 'delivery under way' });
    a.child.kill('SIGSTOP');
    await put(events(prefix, 1500, 60, 1500));
    await waitFor(async () => (await ownedBy('relay-b')) === 16, {
      timeoutMs: 10_000,
      what: 'takeover by relay-b',
    });
    a.child.kill('SIGCONT');
    await waitFor(async () => (await outboxRows()).length === 0, {
      timeoutMs: 60_000,
      what: 'everything delivered',
    });

    const stored = await readStream(NATS_URL, stream);
    expect(stored).toHaveLength(3000);
    expect(new Set(stored.map((s) => s.eventId)).size).toBe(3000);
    expect(orderViolations(stored)).toEqual([]);
    await waitFor(async () => (await ownedBy('relay-a')) > 0, {
      timeoutMs: 10_000,
      what: 'relay-a back in the group',
    });
  });
});
