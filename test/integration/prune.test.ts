import pg from 'pg';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { envelopeHeaders } from '../../src/envelope/bindings.js';
import { OutboxValidationError } from '../../src/errors.js';
import { createInbox } from '../../src/inbox/inbox.js';
import { fromEnvelope, type InboxMessage } from '../../src/inbox/message.js';
import { prune } from '../../src/ops/prune.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxMessage } from '../../src/publishers/contract.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { logRecorder } from '../helpers/log-recorder.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

let db: TestDb;
let s: string;
beforeAll(async () => {
  db = await createTestDb('prune');
  s = `"${db.schema}"`;
});
afterAll(async () => {
  await db?.close();
});

const DAY = 86_400_000;

const write = (aggregateId: string, n = 1) =>
  inTransaction(db.pool, (tx) =>
    enqueue(
      tx,
      Array.from({ length: n }, () => ({
        aggregateType: 'order',
        aggregateId,
        type: 'order.changed',
        payload: {},
      })),
      { schema: db.schema },
    ),
  );

/** Makes an aggregate look last written `days` ago. */
const age = (aggregateId: string, days = 8) =>
  db.pool.query(
    `UPDATE ${s}.aggregate_sequences SET written_at = now() - $2 * interval '1 day'
     WHERE aggregate_type = 'order' AND aggregate_id = $1`,
    [aggregateId, days],
  );

const hasRow = async (aggregateId: string) =>
  (
    await db.pool.query(
      `SELECT 1 FROM ${s}.aggregate_sequences WHERE aggregate_type = 'order' AND aggregate_id = $1`,
      [aggregateId],
    )
  ).rowCount === 1;

/** Runs a relay until `count` more events were published (or went dead), then stops it. */
async function deliver(publisher: RecordingPublisher, count: number, dead = 0): Promise<void> {
  const before = publisher.received.length;
  const relay = createRelay({
    pool: db.pool,
    publisher,
    closePublisher: false,
    schema: db.schema,
    pollIntervalMs: 20,
    maxAttempts: 1,
  });
  await relay.start();
  try {
    await waitFor(() => publisher.received.length - before >= count && relay.stats().dead >= dead, {
      what: `${count} events published`,
    });
  } finally {
    await relay.stop({ timeout: 2000 });
  }
}

/** What a consumer gets: the message through the envelope, as every broker binding carries it. */
const received = (m: OutboxMessage): InboxMessage =>
  fromEnvelope(envelopeHeaders(m, 'test', 'nats'), m.payload);

describe('prune: aggregates', () => {
  it('an idle, delivered aggregate is pruned; written again it continues above the floor, delivered in order, applied by every policy', async () => {
    const publisher = new RecordingPublisher();
    publisher.verdict = (m) =>
      m.aggregateId === 'dead-1'
        ? { ok: false, retryable: false, error: new Error('refused') }
        : { ok: true };
    await write('idle-1', 3);
    await write('long-1', 10); // pruned with idle-1: the floor rises above idle-1's last sequence
    await write('busy-1', 2);
    await write('dead-1', 1);
    await deliver(publisher, 15, 1);
    await write('pending-1', 2); // never delivered: no relay runs now

    // Consumers at every policy see the first life of idle-1.
    const consumers = {
      strict: createInbox({ pool: db.pool, consumer: 'strict', schema: db.schema, ordering: 'strict' }),
      firstSeen: createInbox({
        pool: db.pool,
        consumer: 'first-seen',
        schema: db.schema,
        ordering: 'strict',
        startSequence: 'first-seen',
      }),
      skipStale: createInbox({
        pool: db.pool,
        consumer: 'skip-stale',
        schema: db.schema,
        ordering: 'skip-stale',
      }),
      none: createInbox({ pool: db.pool, consumer: 'none', schema: db.schema, ordering: 'none' }),
    };
    const handler = async () => {};
    const first = publisher.received.filter((m) => m.aggregateId === 'idle-1');
    expect(first.map((m) => m.sequence)).toEqual([1, 2, 3]);
    for (const inbox of Object.values(consumers)) {
      for (const m of first) expect((await inbox.handle(received(m), handler)).status).toBe('processed');
    }

    for (const id of ['idle-1', 'long-1', 'dead-1', 'pending-1']) await age(id);
    const result = await prune(db.pool, { schema: db.schema });
    expect(result).toMatchObject({ ran: true, complete: true, dryRun: false });
    expect(result.removed.aggregate_sequences).toBe(2);
    // Their events named their previous one (015_previous_id.sql): delivered, they wrote no
    // progress; the sequence row's chain says they are delivered.
    expect(result.removed.aggregate_progress).toBe(0);
    expect(result.floor).toBeGreaterThanOrEqual(10);
    expect(await hasRow('idle-1')).toBe(false);
    // Busy (written just now), dead and pending aggregates keep their rows.
    for (const id of ['busy-1', 'dead-1', 'pending-1']) expect(await hasRow(id)).toBe(true);
    const { rows: dead } = await db.pool.query(
      `SELECT count(*)::int AS n FROM ${s}.events WHERE status = 'dead'`,
    );
    expect(dead[0].n).toBe(1);

    // Written again: sequences above everything it had, delivered in order.
    const again = await write('idle-1', 3);
    expect(again.map((r) => r.sequence)).toEqual([result.floor + 1, result.floor + 2, result.floor + 3]);
    await deliver(publisher, 5); // idle-1 again (3) and pending-1 (2)
    const second = publisher.received.filter((m) => m.aggregateId === 'idle-1').slice(3);
    expect(second.map((m) => m.sequence)).toEqual(again.map((r) => r.sequence));
    expect(second.every((m) => m.sequenceBase === result.floor)).toBe(true);
    expect(publisher.received.filter((m) => m.aggregateId === 'pending-1').map((m) => m.sequence)).toEqual([
      1, 2,
    ]);

    // Every policy applies the new life: no gap, no quarantine, no duplicate suppression.
    for (const [name, inbox] of Object.entries(consumers)) {
      const statuses = [];
      for (const m of second) statuses.push((await inbox.handle(received(m), handler)).status);
      expect({ name, statuses }).toEqual({ name, statuses: ['processed', 'processed', 'processed'] });
      // A redelivery from the first life is still a duplicate, never applied again.
      expect((await inbox.handle(received(first[1]!), handler)).status).toBe('duplicate');
    }
    // Once its dedup record is gone, an old redelivery is stale under strict and skip-stale.
    await db.pool.query(`DELETE FROM ${s}.inbox WHERE sequence <= 3 AND aggregate_id = 'idle-1'`);
    for (const inbox of [consumers.strict, consumers.firstSeen, consumers.skipStale]) {
      expect((await inbox.handle(received(first[1]!), handler)).status).toBe('stale');
    }
  });

  it('a consumer that never saw the first life starts strict at the new base', async () => {
    const publisher = new RecordingPublisher();
    await write('late-1', 2);
    await deliver(publisher, 2);
    await age('late-1');
    const { floor } = await prune(db.pool, { schema: db.schema });
    expect(floor).toBeGreaterThan(2); // the first test raised it: sequence 1 is not next
    await write('late-1');
    await deliver(publisher, 1);
    const inbox = createInbox({ pool: db.pool, consumer: 'late', schema: db.schema, ordering: 'strict' });
    const m = publisher.received.at(-1)!;
    expect(m.sequence).toBe(floor + 1);
    expect((await inbox.handle(received(m), async () => {})).status).toBe('processed');
  });

  it('prunes in batches: more rows than one batch, undelivered ones kept', async () => {
    await db.pool.query(
      `INSERT INTO ${s}.aggregate_sequences (aggregate_type, aggregate_id, last_sequence, written_at)
       SELECT 'bulk', 'b' || lpad(i::text, 5, '0'), 1 + i % 7, now() - interval '30 days' FROM generate_series(1, 2500) i`,
    );
    // Every tenth one is behind: one event not yet delivered.
    await db.pool.query(
      `INSERT INTO ${s}.aggregate_progress (aggregate_type, aggregate_id, delivered_sequence)
       SELECT 'bulk', 'b' || lpad(i::text, 5, '0'), 1 + i % 7 - CASE WHEN i % 10 = 0 THEN 1 ELSE 0 END
       FROM generate_series(1, 2500) i`,
    );
    const dry = await prune(db.pool, { schema: db.schema, dryRun: true });
    expect(dry.removed.aggregate_sequences).toBe(2250);
    const result = await prune(db.pool, { schema: db.schema, batchSize: 300 });
    expect(result.removed.aggregate_sequences).toBe(2250);
    expect(result.removed.aggregate_progress).toBe(2250);
    expect(result.floor).toBeGreaterThanOrEqual(7);
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM ${s}.aggregate_sequences WHERE aggregate_type = 'bulk'`,
    );
    expect(rows[0].n).toBe(250);
  });

  it('one pruner per schema: another holding the lock makes a call do nothing', async () => {
    const other = new pg.Client({ connectionString: DATABASE_URL });
    await other.connect();
    try {
      await other.query(`SELECT pg_advisory_lock(hashtextextended('tx-outbox prune ' || $1::text, 0))`, [
        db.schema,
      ]);
      const result = await prune(db.pool, { schema: db.schema });
      expect(result.ran).toBe(false);
    } finally {
      await other.end();
    }
    expect((await prune(db.pool, { schema: db.schema })).ran).toBe(true);
  });

  it('refuses bad retentions before deleting anything', async () => {
    await expect(prune(db.pool, { schema: db.schema, aggregateRetentionMs: 10 })).rejects.toThrow(
      OutboxValidationError,
    );
    await expect(prune(db.pool, { schema: db.schema, inbox: { replayHorizonMs: 8 * DAY } })).rejects.toThrow(
      /replay horizon/,
    );
    await expect(
      prune(db.pool, { schema: db.schema, inbox: { replayHorizonMs: DAY, positionRetentionMs: 7 * DAY } }),
    ).rejects.toThrow(/aggregateRetentionMs/);
    await expect(prune(db.pool, { schema: db.schema, batchSize: 0 })).rejects.toThrow(/batchSize/);
  });
});

describe('prune: relays, audit and the inbox', () => {
  it('removes dead relays, old audit rows, old dedup records, idle positions, stale attempts and released quarantine rows', async () => {
    await db.pool.query(`INSERT INTO ${s}.relays (relay_id, host, pid, lease_ms, heartbeat_at) VALUES
      ('gone', 'h', 1, 1000, now() - interval '2 days'), ('alive', 'h', 2, 1000, now())`);
    await db.pool.query(`INSERT INTO ${s}.audit (at, actor, action, reason) VALUES
      (now() - interval '400 days', 'op', 'replay', 'old'), (now(), 'op', 'replay', 'new')`);
    await db.pool.query(`INSERT INTO ${s}.inbox (consumer, event_id, aggregate_type, aggregate_id, sequence, outcome, processed_at) VALUES
      ('c', gen_random_uuid(), 'order', 'x', 1, 'processed', now() - interval '10 days'),
      ('c', gen_random_uuid(), 'order', 'x', 2, 'processed', now())`);
    await db.pool.query(`INSERT INTO ${s}.inbox_positions (consumer, aggregate_type, aggregate_id, last_sequence, updated_at) VALUES
      ('c', 'order', 'old', 5, now() - interval '20 days'),
      ('c', 'order', 'parked', 5, now() - interval '20 days'),
      ('c', 'order', 'fresh', 5, now())`);
    await db.pool.query(`INSERT INTO ${s}.inbox_attempts (consumer, event_id, attempts, last_reason, last_at) VALUES
      ('c', gen_random_uuid(), 1, 'x', now() - interval '10 days'), ('c', gen_random_uuid(), 1, 'x', now())`);
    await db.pool.query(`INSERT INTO ${s}.inbox_quarantine (consumer, event_id, aggregate_type, aggregate_id, sequence,
        event_type, schema_version, headers, payload, reason, released_at) VALUES
      ('c', gen_random_uuid(), 'order', 'parked', 7, 't', 1, '{}', '\\x', 'r', NULL),
      ('c', gen_random_uuid(), 'order', 'y', 1, 't', 1, '{}', '\\x', 'r', now() - interval '10 days'),
      ('c', gen_random_uuid(), 'order', 'y', 2, 't', 1, '{}', '\\x', 'r', now())`);
    const result = await prune(db.pool, {
      schema: db.schema,
      aggregateRetentionMs: false,
      inbox: { replayHorizonMs: DAY },
    });
    expect(result.removed).toMatchObject({
      relays: 1,
      audit: 1,
      inbox: 1,
      inbox_positions: 1,
      inbox_attempts: 1,
      inbox_quarantine: 1,
    });
    const { rows } = await db.pool.query(
      `SELECT aggregate_id FROM ${s}.inbox_positions WHERE consumer = 'c' ORDER BY aggregate_id`,
    );
    // A position whose aggregate has a message parked unreleased is kept.
    expect(rows.map((r) => r.aggregate_id)).toEqual(['fresh', 'parked']);
    const { rows: relays } = await db.pool.query(`SELECT relay_id FROM ${s}.relays ORDER BY relay_id`);
    expect(relays.map((r) => r.relay_id)).toContain('alive');
    expect(relays.map((r) => r.relay_id)).not.toContain('gone');
  });
});

describe("the relay's background pruner", () => {
  it('prunes on its interval, logs a failed run and tries again, never stopping the relay', async () => {
    const { lines, logger } = logRecorder();
    const registry = new Registry();
    await db.pool.query(
      `INSERT INTO ${s}.audit (at, actor, action, reason) VALUES (now() - interval '400 days', 'op', 'x', 'old')`,
    );
    await db.pool.query(`ALTER TABLE ${s}.audit RENAME TO audit_away`);
    const publisher = new RecordingPublisher();
    const relay = createRelay({
      pool: db.pool,
      publisher,
      schema: db.schema,
      pollIntervalMs: 20,
      logger,
      // The audit trail only when asked (the relay's role may not be granted it).
      prune: { intervalMs: 50, auditRetentionMs: 365 * 86_400_000 },
      metrics: registry,
    });
    await relay.start();
    try {
      await waitFor(() => lines.some((l) => l.msg.startsWith('prune failed')), {
        what: 'a failed prune logged',
      });
      await db.pool.query(`ALTER TABLE ${s}.audit_away RENAME TO audit`);
      await waitFor(
        async () =>
          (
            await db.pool.query(
              `SELECT count(*)::int AS n FROM ${s}.audit WHERE at < now() - interval '365 days'`,
            )
          ).rows[0].n === 0,
        { what: 'the old audit row pruned' },
      );
      // The relay still delivers.
      await write('after-prune');
      await waitFor(() => publisher.received.some((m) => m.aggregateId === 'after-prune'), {
        what: 'delivery',
      });
    } finally {
      await relay.stop({ timeout: 2000 });
    }
    expect(lines.some((l) => l.msg === 'pruned')).toBe(true);
    expect(await registry.metrics()).toMatch(/^tx_outbox_pruned_rows_total\{[^}]*table="audit"[^}]*\} 1$/m);
  });

  it('refuses a bad prune option at createRelay', () => {
    const make = (prune: object) =>
      createRelay({ pool: db.pool, publisher: new RecordingPublisher(), schema: db.schema, prune });
    expect(() => make({ intervalMs: 0 })).toThrow(/prune.intervalMs/);
    expect(() => make({ aggregateRetentionMs: 5 })).toThrow(/aggregateRetentionMs/);
  });
});
