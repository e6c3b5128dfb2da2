/**
 * Pruning `aggregate_progress` of aggregates on caller versions (`enqueue({ sequence })`), which
 * have no `aggregate_sequences` row for the aggregate pruning to find (docs/schema.md, Bounded
 * tables): idle past the retention with nothing left in events, the row goes; the aggregate
 * resumed later is bridged after the grace, with `sequencebase` so that a strict inbox that lost
 * its position too accepts it.
 */
import pg from 'pg';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { envelopeHeaders } from '../../src/envelope/bindings.js';
import { createInbox } from '../../src/inbox/inbox.js';
import { fromEnvelope, type InboxMessage } from '../../src/inbox/message.js';
import { prune } from '../../src/ops/prune.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxMessage } from '../../src/publishers/contract.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

let db: TestDb;
let s: string;
beforeAll(async () => {
  db = await createTestDb('prune_progress');
  s = `"${db.schema}"`;
});
afterAll(async () => {
  await db?.close();
});

const DAY = 86_400_000;
const GRACE = 300;

/** Caller versions: the event rows only, no sequence row. */
const versions = (aggregateId: string, from: number, to: number) =>
  inTransaction(db.pool, (tx) =>
    enqueue(
      tx,
      Array.from({ length: to - from + 1 }, (_, i) => ({
        aggregateType: 'order',
        aggregateId,
        type: 'order.changed',
        payload: { version: from + i },
        sequence: from + i,
      })),
      { schema: db.schema },
    ),
  );

/** Default sequences. */
const write = (aggregateId: string, n: number) =>
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

/** Runs a relay until `count` more events were published, then stops it. */
async function deliver(publisher: RecordingPublisher, count: number): Promise<void> {
  const before = publisher.received.length;
  const relay = createRelay({
    pool: db.pool,
    publisher,
    closePublisher: false,
    schema: db.schema,
    pollIntervalMs: 20,
    gapGraceMs: GRACE,
  });
  await relay.start();
  try {
    await waitFor(() => publisher.received.length - before >= count, { what: `${count} events published` });
  } finally {
    await relay.stop({ timeout: 2000 });
  }
}

/** Makes the relay's last outcome of an aggregate `days` old (and its sequence row, if any). */
async function age(aggregateId: string, days = 8): Promise<void> {
  await db.pool.query(
    `UPDATE ${s}.aggregate_progress SET delivered_at = now() - $2 * interval '1 day'
     WHERE aggregate_type = 'order' AND aggregate_id = $1`,
    [aggregateId, days],
  );
  await db.pool.query(
    `UPDATE ${s}.aggregate_sequences SET written_at = now() - $2 * interval '1 day'
     WHERE aggregate_type = 'order' AND aggregate_id = $1`,
    [aggregateId, days],
  );
}

const progressOf = async (aggregateId: string) =>
  (
    await db.pool.query<{ delivered: number }>(
      `SELECT delivered_sequence::int AS delivered FROM ${s}.aggregate_progress
       WHERE aggregate_type = 'order' AND aggregate_id = $1`,
      [aggregateId],
    )
  ).rows[0]?.delivered;

const received = (m: OutboxMessage): InboxMessage =>
  fromEnvelope(envelopeHeaders(m, 'test', 'nats'), m.payload);

describe('prune: progress of caller versions', () => {
  it('an idle caller-versioned aggregate loses its progress row; resumed, it is bridged and a strict inbox without its position accepts it', async () => {
    const publisher = new RecordingPublisher();
    await versions('c-idle', 1, 56);
    await versions('c-active', 1, 2);
    await versions('c-repeat', 1, 3);
    await versions('c-later', 1, 2);
    await write('d-idle', 2);
    await deliver(publisher, 56 + 2 + 3 + 2 + 2);
    expect(await progressOf('c-idle')).toBe(56);
    const { rows: recorded } = await db.pool.query(
      `SELECT count(*)::int AS n FROM ${s}.aggregate_progress WHERE delivered_at > now() - interval '1 minute'`,
    );
    // The relay's upsert sets delivered_at: for the 4 caller-versioned aggregates. d-idle's events
    // name their previous one (015_previous_id.sql): delivering them writes no progress.
    expect(recorded[0].n).toBe(4);

    // Left in events: a dead repeat of c-repeat, a scheduled version of c-later. Both hold back.
    await db.pool.query(
      `INSERT INTO ${s}.events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload, status, dead_at)
       VALUES (gen_random_uuid(), ${s}.partition_of('order', 'c-repeat'), 'order', 'c-repeat', 2, 'order.changed', '{}', 'dead', now())`,
    );
    await inTransaction(db.pool, (tx) =>
      enqueue(
        tx,
        {
          aggregateType: 'order',
          aggregateId: 'c-later',
          type: 'order.changed',
          payload: {},
          sequence: 3,
          deliverAfter: new Date(Date.now() + DAY),
        },
        { schema: db.schema },
      ),
    );

    // A strict consumer applies c-idle's first 56 versions.
    const strict = createInbox({ pool: db.pool, consumer: 'strict', schema: db.schema, ordering: 'strict' });
    for (const m of publisher.received.filter((x) => x.aggregateId === 'c-idle')) {
      expect((await strict.handle(received(m), async () => {})).status).toBe('processed');
    }

    for (const id of ['c-idle', 'c-repeat', 'c-later', 'd-idle']) await age(id);
    // The consumer's position goes too (untouched past R_c).
    await db.pool.query(`UPDATE ${s}.inbox_positions SET updated_at = now() - interval '20 days'`);

    const dry = await prune(db.pool, { schema: db.schema, dryRun: true });
    expect(dry.removed.aggregate_progress).toBe(1); // c-idle (d-idle has none: see above)
    expect(dry.removed.aggregate_sequences).toBe(1);
    expect(await progressOf('c-idle')).toBe(56);

    const result = await prune(db.pool, { schema: db.schema, inbox: { replayHorizonMs: DAY } });
    expect(result).toMatchObject({ ran: true, complete: true });
    expect(result.removed.aggregate_progress).toBe(1);
    expect(result.removed.aggregate_sequences).toBe(1);
    expect(result.removed.inbox_positions).toBe(1);
    expect(await progressOf('c-idle')).toBeUndefined();
    expect(await progressOf('d-idle')).toBeUndefined();
    expect(await progressOf('c-active')).toBe(2); // delivered just now
    expect(await progressOf('c-repeat')).toBe(3); // its dead repeat is still in events
    expect(await progressOf('c-later')).toBe(2); // its version 3 waits in events

    // Resumed at 57: held at a gap for the grace (the relay forgot 56), then bridged with base 56.
    await versions('c-idle', 57, 58);
    const started = Date.now();
    await deliver(publisher, 2);
    expect(Date.now() - started).toBeGreaterThanOrEqual(GRACE);
    const resumed = publisher.received.filter((m) => m.aggregateId === 'c-idle').slice(56);
    expect(resumed.map((m) => [m.sequence, m.sequenceBase ?? 0])).toEqual([
      [57, 56],
      [58, 0],
    ]);
    expect(await progressOf('c-idle')).toBe(58);
    // The strict inbox has no position for c-idle any more: base 56 makes 57 next.
    for (const m of resumed) {
      expect((await strict.handle(received(m), async () => {})).status).toBe('processed');
    }
  });

  it('the relay’s background pruner removes them too', async () => {
    const registry = new Registry();
    await db.pool.query(
      `INSERT INTO ${s}.aggregate_progress (aggregate_type, aggregate_id, delivered_sequence, delivered_at)
       VALUES ('order', 'c-background', 7, now() - interval '8 days')`,
    );
    const relay = createRelay({
      pool: db.pool,
      publisher: new RecordingPublisher(),
      schema: db.schema,
      pollIntervalMs: 20,
      prune: { intervalMs: 50 },
      metrics: registry,
    });
    await relay.start();
    try {
      await waitFor(async () => (await progressOf('c-background')) === undefined, {
        what: 'the idle progress row pruned',
      });
    } finally {
      await relay.stop({ timeout: 2000 });
    }
    expect(await registry.metrics()).toMatch(
      /^tx_outbox_pruned_rows_total\{[^}]*table="aggregate_progress"[^}]*\} [1-9]/m,
    );
  });

  it('skips a progress row a relay holds locked; batches over many rows', async () => {
    await db.pool.query(
      `INSERT INTO ${s}.aggregate_progress (aggregate_type, aggregate_id, delivered_sequence, delivered_at)
       SELECT 'bulk', 'b' || lpad(i::text, 4, '0'), 5, now() - interval '30 days' FROM generate_series(1, 50) i`,
    );
    // Every tenth one still has an event in the table.
    await db.pool.query(
      `INSERT INTO ${s}.events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload)
       SELECT gen_random_uuid(), ${s}.partition_of('bulk', 'b' || lpad(i::text, 4, '0')), 'bulk', 'b' || lpad(i::text, 4, '0'), 6, 'x', '{}'
       FROM generate_series(10, 50, 10) i`,
    );
    const other = new pg.Client({ connectionString: DATABASE_URL });
    await other.connect();
    try {
      await other.query('BEGIN');
      await other.query(
        `SELECT 1 FROM ${s}.aggregate_progress WHERE aggregate_type = 'bulk' AND aggregate_id = 'b0001' FOR UPDATE`,
      );
      const dry = await prune(db.pool, { schema: db.schema, dryRun: true });
      expect(dry.removed.aggregate_progress).toBe(45);
      const result = await prune(db.pool, { schema: db.schema, batchSize: 7 });
      expect(result.removed.aggregate_progress).toBe(44);
    } finally {
      await other.query('ROLLBACK');
      await other.end();
    }
    const { rows } = await db.pool.query(
      `SELECT aggregate_id FROM ${s}.aggregate_progress WHERE aggregate_type = 'bulk' ORDER BY aggregate_id`,
    );
    expect(rows.map((r) => r.aggregate_id)).toEqual(['b0001', 'b0010', 'b0020', 'b0030', 'b0040', 'b0050']);
    expect((await prune(db.pool, { schema: db.schema })).removed.aggregate_progress).toBe(1);
  });
});
