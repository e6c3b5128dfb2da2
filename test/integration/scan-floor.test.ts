/**
 * The claim's scan floor (src/relay/scan-floor.ts) on the real server:
 * - with a snapshot held open on another connection, a claim that starts at the floor does not
 *   walk the rows deleted since that snapshot began (read from EXPLAIN ANALYZE's buffers: the
 *   floor is an index condition, not a filter);
 * - an event whose transaction commits long after the claims passed its id (the floor is past
 *   it) is still delivered, by the next full scan, and so is a retry whose backoff ran out
 *   below the floor.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { PublishError } from '../../src/errors.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import { CLAIM_SQL } from '../../src/relay/claim/claim-sql.js';
import { createRelay, type Relay } from '../../src/relay/polling/relay.js';
import { relaySessionSettings } from '../../src/relay/session.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

let db: TestDb;
const relays: Relay[] = [];
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** Every partition of the schema (createTestDb's 16): a claim under all of them. */
const ALL = [...Array(16).keys()];

beforeAll(async () => {
  db = await createTestDb('scan_floor');
});
afterEach(async () => {
  await Promise.all(relays.splice(0).map((r) => r.stop({ timeout: 2000 })));
  await db.pool.query(`DELETE FROM "${db.schema}".events`);
});
afterAll(async () => {
  await db?.close();
});

const event = (aggregateId: string, i: number): OutboxEvent => ({
  aggregateType: 'o',
  aggregateId,
  type: 't',
  payload: { i },
});

interface PlanNode {
  readonly 'Node Type': string;
  readonly 'Relation Name'?: string;
  readonly 'Actual Rows': number;
  readonly 'Shared Hit Blocks'?: number;
  readonly 'Shared Read Blocks'?: number;
  readonly Plans?: readonly PlanNode[];
}

function* nodes(node: PlanNode): Generator<PlanNode> {
  yield node;
  for (const child of node.Plans ?? []) yield* nodes(child);
}

describe('the scan floor', () => {
  it('skips the rows deleted under a held snapshot: a floored claim reads a fraction of a full one', async () => {
    const s = `"${db.schema}"`;
    const holder = await db.pool.connect();
    const client = await db.pool.connect();
    try {
      await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await holder.query(`SELECT 1 FROM ${s}.events LIMIT 1`);
      // 20,000 events delivered (deleted) while the snapshot is held, then 100 pending ones.
      await db.pool.query(
        `INSERT INTO ${s}.events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload)
         SELECT gen_random_uuid(), ${s}.partition_of('old', 'a' || i), 'old', 'a' || i, 1, 't', '{}'::jsonb FROM generate_series(1, 20000) AS i`,
      );
      await db.pool.query(`DELETE FROM ${s}.events WHERE aggregate_type = 'old'`);
      await db.pool.query(
        `INSERT INTO ${s}.events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload)
         SELECT gen_random_uuid(), ${s}.partition_of('new', 'a' || i), 'new', 'a' || i, 1, 't', '{}'::jsonb FROM generate_series(1, 100) AS i`,
      );
      const { rows: first } = await db.pool.query(`SELECT min(id)::text AS id FROM ${s}.events`);
      await db.pool.query(
        `UPDATE ${s}.partitions SET owner = 'floor', epoch = 1, lease_until = now() + interval '1 hour'`,
      );
      await client.query(relaySessionSettings('off'));
      const buffers = async (from: string): Promise<{ blocks: number; rows: number }> => {
        const { rows } = await client.query({
          text: `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${CLAIM_SQL.replaceAll('{{schema}}', s)}`,
          values: [ALL, ALL.map(() => '1'), 'floor', 1000, [], [], from, []],
        });
        const plan = (rows[0] as { 'QUERY PLAN': Array<{ Plan: PlanNode }> })['QUERY PLAN'][0]!.Plan;
        // The scan of the events table alone: the probes per row its filter runs (these rows are
        // gated by sequence: aggregate_progress) are its sub-plans, and come on top of it.
        const scan = [...nodes(plan)].find(
          (n) => n['Node Type'] === 'Index Scan' && n['Relation Name'] === 'events',
        );
        const blocks = (n: PlanNode | undefined) =>
          (n?.['Shared Hit Blocks'] ?? 0) + (n?.['Shared Read Blocks'] ?? 0);
        return {
          blocks: blocks(scan) - (scan?.Plans ?? []).reduce((sum, sub) => sum + blocks(sub), 0),
          rows: scan?.['Actual Rows'] ?? -1,
        };
      };
      const full = await buffers('0');
      const floored = await buffers(first[0].id as string);
      expect(full.rows).toBe(100);
      expect(floored.rows).toBe(100);
      // The full scan visits the 20,000 dead rows' pages; the floored one starts past them.
      expect(full.blocks).toBeGreaterThan(200);
      expect(floored.blocks).toBeLessThan(full.blocks / 10);
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      await db.pool.query(`UPDATE ${s}.partitions SET owner = NULL, lease_until = '-infinity'`);
      await client.query('RESET ALL').catch(() => undefined);
      holder.release();
      client.release();
    }
  });

  it('delivers an event whose transaction commits after the floor passed its id', async () => {
    const publisher = new RecordingPublisher();
    const r = createRelay({
      pool: db.pool,
      publisher,
      schema: db.schema,
      pollIntervalMs: 200,
      leaseMs: 3000,
    });
    relays.push(r);
    await r.start();
    // A producer draws a low id and keeps its transaction open.
    const late = await db.pool.connect();
    try {
      await late.query('BEGIN');
      await enqueue(late, event('late', 0), { schema: db.schema });
      // Others commit after it for longer than the floor's trail (2 s): every claim sees their
      // ids above the open one, and the floor passes it.
      for (let i = 0; i < 30; i++) {
        await inTransaction(db.pool, (tx) => enqueue(tx, event(`busy-${i % 5}`, i), { schema: db.schema }));
        await sleep(100);
      }
      await waitFor(() => publisher.received.length === 30, { what: '30 deliveries' });
      await late.query('COMMIT');
    } finally {
      late.release();
    }
    await waitFor(() => publisher.received.some((m) => m.aggregateId === 'late'), {
      what: 'the late event',
      timeoutMs: 10_000,
    });
    // Its aggregate goes on in order.
    await inTransaction(db.pool, (tx) => enqueue(tx, event('late', 1), { schema: db.schema }));
    await waitFor(() => publisher.received.filter((m) => m.aggregateId === 'late').length === 2, {
      what: 'the late aggregate’s second event',
    });
    expect(publisher.received.filter((m) => m.aggregateId === 'late').map((m) => m.sequence)).toEqual([1, 2]);
  });

  it('retries an event whose backoff ends below the floor, before its aggregate’s next event', async () => {
    const publisher = new RecordingPublisher();
    let failed = false;
    publisher.verdict = (m) => {
      if (m.aggregateId === 'flaky' && !failed) {
        failed = true;
        return { ok: false, retryable: true, error: new PublishError('once', { retryable: true }) };
      }
      return { ok: true };
    };
    const r = createRelay({
      pool: db.pool,
      publisher,
      schema: db.schema,
      pollIntervalMs: 200,
      leaseMs: 3000,
      backoff: { baseMs: 3_000, capMs: 3_000 },
      // The whole backoff: the floor passes the event's id meanwhile.
      random: () => 0.999,
    });
    relays.push(r);
    await r.start();
    await inTransaction(db.pool, (tx) =>
      enqueue(tx, [event('flaky', 0), event('flaky', 1)], { schema: db.schema }),
    );
    // Traffic past it while it backs off: the floor moves above its id.
    for (let i = 0; i < 40; i++) {
      await inTransaction(db.pool, (tx) => enqueue(tx, event(`busy-${i % 5}`, i), { schema: db.schema }));
      await sleep(100);
    }
    await waitFor(() => publisher.received.filter((m) => m.aggregateId === 'flaky').length === 2, {
      what: 'both flaky events',
      timeoutMs: 10_000,
    });
    expect(publisher.received.filter((m) => m.aggregateId === 'flaky').map((m) => m.sequence)).toEqual([
      1, 2,
    ]);
  });
});
