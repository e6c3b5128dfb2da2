/**
 * Caller versions (`enqueue({ sequence })`) the producer cannot check across transactions, made
 * safe by the relay (docs/guarantees.md, Caller versions): a repeat goes dead without blocking its
 * aggregate; a gap with nothing earlier left is bridged after the grace (and only then), so that a
 * `strict` inbox accepts the jump. Event rows are written through `enqueue({ sequence })`, or
 * with plain SQL where a state is wanted that enqueue does not make (dead, backing off). The
 * producer's side: test/integration/caller-versions.test.ts.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { Registry } from 'prom-client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { envelopeHeaders } from '../../src/envelope/bindings.js';
import { PublishError } from '../../src/errors.js';
import { createInbox } from '../../src/inbox/inbox.js';
import { fromEnvelope } from '../../src/inbox/message.js';
import { listDead } from '../../src/ops/dead-letter.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import type { OutboxMessage } from '../../src/publishers/contract.js';
import { BRIDGE_GAPS_SQL } from '../../src/relay/claim/sequence-faults-sql.js';
import { createRelay, type Relay } from '../../src/relay/polling/relay.js';
import { relaySessionSettings } from '../../src/relay/session.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { logRecorder } from '../helpers/log-recorder.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';
import { sample } from '../helpers/metrics.js';

let db: TestDb;
const relays: Relay[] = [];
/** Names of the relay's prepared statements run, in order (every pooled connection is watched). */
const statements: string[] = [];
/** Latency put on the relay's statements, ms: a claim's reply, an outcome's sending. */
const latency = { claimReplyMs: 0, outcomeSendMs: 0, probeReplyMs: 0 };
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

beforeAll(async () => {
  db = await createTestDb('sequence_faults');
  // On every checkout: clients made before this listener (migrate's) are pooled too.
  const watched = new WeakSet<pg.PoolClient>();
  db.pool.on('acquire', (client: pg.PoolClient) => {
    if (watched.has(client)) return;
    watched.add(client);
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as { query: unknown }).query = (...args: unknown[]) => {
      const name = (args[0] as { name?: unknown } | undefined)?.name;
      if (typeof name !== 'string') return query(...args);
      statements.push(name);
      if (name.startsWith('txo_claim_') && latency.claimReplyMs > 0)
        return (query(...args) as Promise<unknown>).then(async (r) => {
          await sleep(latency.claimReplyMs);
          return r;
        });
      if (name.startsWith('txo_bridge_gaps_') && latency.probeReplyMs > 0)
        return (query(...args) as Promise<unknown>).then(async (r) => {
          await sleep(latency.probeReplyMs);
          return r;
        });
      if (name.startsWith('txo_outcome_') && latency.outcomeSendMs > 0)
        return sleep(latency.outcomeSendMs).then(() => query(...args));
      return query(...args);
    };
  });
});
afterEach(async () => {
  await Promise.all(relays.splice(0).map((r) => r.stop({ timeout: 2000 })));
  await db.pool.query(`DELETE FROM "${db.schema}".events`);
  statements.length = 0;
  latency.claimReplyMs = 0;
  latency.outcomeSendMs = 0;
  latency.probeReplyMs = 0;
});
afterAll(async () => {
  await db?.close();
});

const GRACE = 300;

function relay(publisher: RecordingPublisher, extra: Partial<Parameters<typeof createRelay>[0]> = {}): Relay {
  const r = createRelay({
    pool: db.pool,
    publisher,
    schema: db.schema,
    pollIntervalMs: 50,
    leaseMs: 3000,
    gapGraceMs: GRACE,
    ...extra,
  });
  relays.push(r);
  return r;
}

interface Row {
  readonly sequence: number;
  readonly status?: 'pending' | 'dead';
  /** next_attempt_at this far ahead, ms (a deliverAfter, or a backoff). */
  readonly dueInMs?: number;
  readonly attempts?: number;
}

/**
 * Inserts events of `order/<id>` with these sequences, in this order (id order), as a caller
 * passing its own versions would: `sequence_base` 0, no aggregate_sequences row.
 */
async function insert(aggregateId: string, rows: readonly Row[]): Promise<void> {
  for (const r of rows) {
    await db.pool.query(
      `INSERT INTO "${db.schema}".events (event_id, partition, aggregate_type, aggregate_id, sequence, sequence_base,
                                          event_type, payload, status, attempts, next_attempt_at, dead_at)
       VALUES ($1, ((hashtextextended('order' || chr(31) || $2, 0) & 9223372036854775807)
                    % (SELECT partitions FROM "${db.schema}".config))::smallint,
               'order', $2, $3, 0, 'order.changed', $4::jsonb, $5, $6,
               now() + $7 * interval '1 millisecond', CASE WHEN $5 = 'dead' THEN now() END)`,
      [
        randomUUID(),
        aggregateId,
        r.sequence,
        JSON.stringify({ version: r.sequence }),
        r.status ?? 'pending',
        r.attempts ?? 0,
        r.dueInMs ?? 0,
      ],
    );
  }
}

async function put(events: OutboxEvent[]): Promise<void> {
  await inTransaction(db.pool, (tx) => enqueue(tx, events, { schema: db.schema }));
}

/** Starts the relay and waits until it holds every partition (a stopped relay's share frees up only with its lease). */
async function running(r: Relay): Promise<Relay> {
  await r.start();
  await waitFor(() => r.stats().partitions.length === 16, { what: 'all partitions held' });
  return r;
}

const sequences = (p: RecordingPublisher, aggregateId: string): number[] =>
  p.received.filter((m) => m.aggregateId === aggregateId).map((m) => m.sequence);

const bridgeProbes = (): number => statements.filter((s) => s.startsWith('txo_bridge_gaps_')).length;

async function rowsOf(aggregateId: string) {
  const { rows } = await db.pool.query<{ sequence: number; status: string; last_error: string | null }>(
    `SELECT sequence::int, status, last_error FROM "${db.schema}".events WHERE aggregate_id = $1 ORDER BY id`,
    [aggregateId],
  );
  return rows;
}

const own = () => ({ schema: db.schema, publisher: 'recording' });

describe('caller versions: repeats', () => {
  it('a repeated version goes dead at once, visibly, and the aggregate’s next event is still published in order', async () => {
    const registry = new Registry();
    const publisher = new RecordingPublisher();
    const { lines, logger } = logRecorder();
    // Through enqueue({ sequence }): version 3 written twice, by two transactions.
    for (const sequence of [1, 2, 3, 3, 4])
      await put([
        { aggregateType: 'order', aggregateId: '42', type: 'order.changed', payload: {}, sequence },
      ]);
    const r = relay(publisher, { metrics: registry, logger });
    await r.start();
    await waitFor(() => sequences(publisher, '42').length === 4, { what: 'four published' });
    await waitFor(async () => (await rowsOf('42')).length === 1, { what: 'only the repeat left' });
    expect(sequences(publisher, '42')).toEqual([1, 2, 3, 4]);
    const [dead] = await rowsOf('42');
    expect(dead).toMatchObject({ sequence: 3, status: 'dead' });
    expect(dead!.last_error).toMatch(
      /^sequence 3 of order\/42 repeats one already delivered \(3\): caller versions must rise by one per event; do not mix default and caller sequences in one aggregate/,
    );
    // It holds nothing back: the aggregate is not blocked, its later events flow.
    const { rows: progress } = await db.pool.query(
      `SELECT delivered_sequence::int, blocked_until FROM "${db.schema}".aggregate_progress WHERE aggregate_id = '42'`,
    );
    expect(progress).toEqual([{ delivered_sequence: 4, blocked_until: null }]);
    await insert('42', [{ sequence: 5 }]);
    await waitFor(() => sequences(publisher, '42').length === 5, { what: 'sequence 5' });
    // Counted (once the relay has recorded the broker's answer), logged and listed.
    await waitFor(() => r.stats().published === 5, { what: 'sequence 5 recorded' });
    expect(r.stats()).toMatchObject({ dead: 1, published: 5 });
    expect(
      await sample(registry, 'tx_outbox_events_dead_total', { ...own(), reason: 'sequence_repeat' }),
    ).toBe(1);
    expect(lines.find((l) => l.msg.startsWith('event is dead: its sequence repeats'))?.obj).toMatchObject({
      aggregateId: '42',
      sequence: 3,
      delivered: 3,
    });
    const listed = await listDead(db.pool, { schema: db.schema, aggregateId: '42' });
    expect(listed.map((e) => [e.aggregateId, e.sequence, e.lastError?.slice(0, 20)])).toEqual([
      ['42', 3, 'sequence 3 of order/'],
    ]);
  });

  it('a repeat is never published while the version it repeats is in flight (one event per batch, pipelined)', async () => {
    const publisher = new RecordingPublisher();
    publisher.delayMs = 30; // the next claim runs while the batch is published
    await insert('flight', [
      { sequence: 1 },
      { sequence: 2 },
      { sequence: 3 },
      { sequence: 3 },
      { sequence: 4 },
    ]);
    await relay(publisher, { batchSize: 1 }).start();
    await waitFor(() => sequences(publisher, 'flight').includes(4), { what: 'sequence 4' });
    await sleep(200);
    expect(sequences(publisher, 'flight')).toEqual([1, 2, 3, 4]);
    expect(await rowsOf('flight')).toMatchObject([{ sequence: 3, status: 'dead' }]);
  });

  it('a repeat is never published when its twin’s outcome lands while the claim runs (the snapshot predates it)', async () => {
    // The claim's snapshot is taken before the outcome of the first 2 commits (it is sent 40 ms
    // after the publish), and the claim's reply comes 200 ms later (network latency), after that
    // outcome landed. Before the fix the second 2 passed (delivered 1 in the snapshot, its twin
    // no longer in flight) and was published as well.
    latency.claimReplyMs = 200;
    latency.outcomeSendMs = 40;
    const publisher = new RecordingPublisher();
    await insert('late', [{ sequence: 1 }, { sequence: 2 }, { sequence: 2 }, { sequence: 3 }]);
    await relay(publisher, { batchSize: 1 }).start();
    await waitFor(() => sequences(publisher, 'late').includes(3), { what: 'sequence 3', timeoutMs: 15_000 });
    await sleep(300);
    expect(sequences(publisher, 'late')).toEqual([1, 2, 3]);
    expect(await rowsOf('late')).toMatchObject([{ sequence: 2, status: 'dead' }]);
  });

  it('a caller version below what default sequences delivered (the two mixed in one aggregate) goes dead', async () => {
    const publisher = new RecordingPublisher();
    await put(
      [1, 2, 3].map((i) => ({ aggregateType: 'order', aggregateId: 'mixed', type: 't', payload: i })),
    );
    await relay(publisher).start();
    await waitFor(() => sequences(publisher, 'mixed').length === 3, { what: 'default sequences' });
    await insert('mixed', [{ sequence: 2 }, { sequence: 4 }]);
    await waitFor(() => sequences(publisher, 'mixed').length === 4, { what: 'the caller version 4' });
    const rows = await rowsOf('mixed');
    expect(rows).toMatchObject([{ sequence: 2, status: 'dead' }]);
    expect(rows[0]!.last_error).toContain('repeats one already delivered (3)');
  });

  it('a version repeated behind a gap is never passed before the gap is settled (the gate ranks distinct sequences)', async () => {
    const publisher = new RecordingPublisher();
    await insert('dup', [{ sequence: 1 }, { sequence: 3 }, { sequence: 3 }]);
    // Before, the second 3 passed as the "third" event (delivered 0 + rank 3) with 2 missing.
    await relay(publisher, { gapGraceMs: 60_000 }).start();
    await waitFor(() => sequences(publisher, 'dup').length >= 1, { what: 'sequence 1' });
    await sleep(500);
    expect(sequences(publisher, 'dup')).toEqual([1]);
  });
});

describe('caller versions: gaps', () => {
  it('a skipped version (1, 2, 4): 4 is published after the grace with sequencebase 3, and a strict inbox accepts it', async () => {
    const registry = new Registry();
    const publisher = new RecordingPublisher();
    const { lines, logger } = logRecorder();
    // Through enqueue({ sequence }), one transaction per version, as a caller that skipped 3.
    for (const sequence of [1, 2, 4])
      await put([
        { aggregateType: 'order', aggregateId: 'gap', type: 'order.changed', payload: {}, sequence },
      ]);
    const started = Date.now();
    await relay(publisher, { metrics: registry, logger }).start();
    await waitFor(() => sequences(publisher, 'gap').length === 2, { what: '1 and 2' });
    await sleep(GRACE / 2);
    expect(sequences(publisher, 'gap')).toEqual([1, 2]);
    await waitFor(() => sequences(publisher, 'gap').length === 3, { what: 'the bridged 4' });
    expect(Date.now() - started).toBeGreaterThanOrEqual(GRACE);
    const bridged = publisher.received.find((m) => m.aggregateId === 'gap' && m.sequence === 4)!;
    expect(bridged.sequenceBase).toBe(3);
    expect(await sample(registry, 'tx_outbox_events_gap_bridged_total', own())).toBe(1);
    expect(lines.find((l) => l.msg.startsWith('sequence gap bridged'))?.obj).toMatchObject({
      aggregateType: 'order',
      aggregateId: 'gap',
      expected: 3,
      found: 4,
    });
    // The caller carries on from 4: no base needed any more.
    await insert('gap', [{ sequence: 5 }]);
    await waitFor(() => sequences(publisher, 'gap').length === 4, { what: 'sequence 5' });
    const five = publisher.received.find((m) => m.aggregateId === 'gap' && m.sequence === 5)!;
    expect(five.sequenceBase).toBeUndefined();

    const statuses = await strictInbox(publisher.received.filter((m) => m.aggregateId === 'gap'));
    expect(statuses).toEqual(['processed', 'processed', 'processed', 'processed']);
  });

  it('on a pool of exactly 4 the relay probes, keeps its leases and stops, and the pool ends', async () => {
    const small = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
    const publisher = new RecordingPublisher();
    const r = createRelay({
      pool: small,
      publisher,
      schema: db.schema,
      pollIntervalMs: 50,
      leaseMs: 1000, // renewals every few hundred ms, on the fourth connection, in turn with the probe
      gapGraceMs: GRACE,
    });
    try {
      await insert('small-pool', [{ sequence: 1 }, { sequence: 3 }]);
      await r.start();
      await waitFor(() => sequences(publisher, 'small-pool').length === 2, { what: 'the bridged 3' });
      // Past several lease lengths, the relay still holds its partitions and delivers.
      await sleep(2500);
      expect(r.stats().partitions.length).toBe(16);
      await insert('small-pool', [{ sequence: 4 }]);
      await waitFor(() => sequences(publisher, 'small-pool').length === 3, { what: 'sequence 4' });
      const stopped = await Promise.race([
        r.stop({ timeout: 2000 }).then(() => true),
        sleep(8000).then(() => false),
      ]);
      expect(stopped).toBe(true);
      const ended = await Promise.race([small.end().then(() => true), sleep(5000).then(() => false)]);
      expect(ended).toBe(true);
    } finally {
      await r.stop({ timeout: 500 }).catch(() => undefined);
    }
  });

  it('a probe never delays a batch ready to publish: it runs in the background, on its own connection', async () => {
    latency.probeReplyMs = 2000; // a probe of a huge backlog
    const publisher = new RecordingPublisher();
    await insert('slow', [{ sequence: 2 }]);
    await running(relay(publisher, { gapGraceMs: 50 }));
    await waitFor(() => bridgeProbes() > 0, { what: 'a probe' });
    // Before, the probe ran inside the claim: nothing was published until it returned.
    await insert('free', [{ sequence: 1 }, { sequence: 2 }]);
    await waitFor(() => sequences(publisher, 'free').length === 2, {
      what: 'free published',
      timeoutMs: 1000,
    });
    await waitFor(() => sequences(publisher, 'slow').length === 1, { what: 'the bridged head' });
    expect(bridgeProbes()).toBe(1); // one at a time: none started while it ran
  });

  it('a head another transaction holds is skipped: the probe never waits on a row lock', async () => {
    const publisher = new RecordingPublisher();
    await insert('locked', [{ sequence: 2 }]);
    await insert('other', [{ sequence: 3 }]);
    const locker = await db.pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query(`SELECT 1 FROM "${db.schema}".events WHERE aggregate_id = 'locked' FOR UPDATE`);
      await running(relay(publisher, { gapGraceMs: 50 }));
      // Before, the probe waited for the lock, holding the claim (and the partitions' rows).
      await waitFor(() => sequences(publisher, 'other').length === 1, {
        what: 'other bridged',
        timeoutMs: 3000,
      });
      await insert('unlocked', [{ sequence: 1 }]);
      await waitFor(() => sequences(publisher, 'unlocked').length === 1, {
        what: 'unlocked published',
        timeoutMs: 3000,
      });
      expect(sequences(publisher, 'locked')).toEqual([]);
    } finally {
      await locker.query('ROLLBACK');
      locker.release();
    }
    await waitFor(() => sequences(publisher, 'locked').length === 1, {
      what: 'the locked head, bridged later',
    });
    expect(publisher.received.find((m) => m.aggregateId === 'locked')?.sequenceBase).toBe(1);
  });

  it('a probe reads the rows ahead of its heads by primary key, not the table', async () => {
    const c = await db.pool.connect();
    try {
      await c.query(relaySessionSettings('on'));
      await c.query('BEGIN');
      const s = `"${db.schema}"`;
      const bulk = (n: number) =>
        c.query(
          `INSERT INTO ${s}.events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload)
           SELECT gen_random_uuid(), ${s}.partition_of('bulk', g::text), 'bulk', g::text, 1, 't', '{}'
           FROM generate_series(1, $1::int) g`,
          [n],
        );
      await bulk(2000);
      const { rows } = await c.query<{ id: string; partition: number }>(
        `INSERT INTO ${s}.events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload)
         VALUES (gen_random_uuid(), ${s}.partition_of('order', 'ahead'), 'order', 'ahead', 3, 't', '{}')
         RETURNING id::text, partition`,
      );
      await bulk(3000);
      const partition = rows[0]!.partition;
      await c.query(`UPDATE ${s}.partitions SET owner = 'explain' WHERE partition = $1`, [partition]);
      const { rows: epoch } = await c.query<{ epoch: string }>(
        `SELECT epoch::text FROM ${s}.partitions WHERE partition = $1`,
        [partition],
      );
      const plan = await c.query<{ 'QUERY PLAN': string }>(
        `EXPLAIN (ANALYZE, COSTS OFF) ${BRIDGE_GAPS_SQL.replaceAll('{{schema}}', s)}`,
        ['explain', [partition], [epoch[0]!.epoch], [rows[0]!.id]],
      );
      const text = plan.rows.map((r) => r['QUERY PLAN']).join('\n');
      expect(text).not.toMatch(/Seq Scan on events/);
      // The 2000 rows ahead of the head, read by a primary-key range, and not the 3000 after it.
      expect(text).toMatch(
        /Index Scan using events_pkey on events o\w*\s+\(actual[^\n]*\n\s+Index Cond: \(id < /,
      );
      expect(text).toMatch(/Rows Removed by Filter: 2000\b/);
    } finally {
      await c.query('ROLLBACK');
      c.release();
    }
  });

  it('an aggregate adopted at version 17 is bridged (sequencebase 16) and a strict inbox starting at 1 accepts it', async () => {
    const publisher = new RecordingPublisher();
    await insert('adopted', [{ sequence: 17 }, { sequence: 18 }]);
    await relay(publisher).start();
    await waitFor(() => sequences(publisher, 'adopted').length === 2, { what: 'both published' });
    const [first, second] = publisher.received.filter((m) => m.aggregateId === 'adopted');
    expect([first!.sequence, first!.sequenceBase, second!.sequence, second!.sequenceBase]).toEqual([
      17,
      16,
      18,
      undefined,
    ]);
    expect(await strictInbox([first!, second!])).toEqual(['processed', 'processed']);
  });

  it('no bridge while an earlier event is scheduled for later (deliverAfter): the probe finds it', async () => {
    const publisher = new RecordingPublisher();
    await running(relay(publisher, { gapGraceMs: 50 }));
    await put([
      {
        aggregateType: 'order',
        aggregateId: 'later',
        type: 't',
        payload: 1,
        sequence: 1,
        deliverAfter: new Date(Date.now() + 2000),
      },
      { aggregateType: 'order', aggregateId: 'later', type: 't', payload: 2, sequence: 2 },
    ]);
    await waitFor(() => bridgeProbes() > 0, { what: 'a probe' });
    await waitFor(() => sequences(publisher, 'later').length === 2, { timeoutMs: 10_000, what: 'both' });
    const sent = publisher.received.filter((m) => m.aggregateId === 'later');
    expect(sent.map((m) => [m.sequence, m.sequenceBase])).toEqual([
      [1, undefined],
      [2, undefined],
    ]);
  });

  it('no bridge while an earlier event backs off (in the table, due later, attempted)', async () => {
    const publisher = new RecordingPublisher();
    let failed = false;
    publisher.verdict = (m) => {
      if (m.aggregateId === 'backoff2' && m.sequence === 1 && !failed) {
        failed = true;
        return { ok: false, retryable: true, error: new PublishError('not now', { retryable: true }) };
      }
      return { ok: true };
    };
    await running(
      relay(publisher, { gapGraceMs: 50, backoff: { baseMs: 1000, capMs: 1000 }, random: () => 1 }),
    );
    // As a relay that crashed between a failed attempt and its aggregate's block would leave it.
    await insert('backoff', [{ sequence: 1, attempts: 1, dueInMs: 1500 }, { sequence: 3 }]);
    // A failed attempt for real: the aggregate is blocked until the retry.
    await insert('backoff2', [{ sequence: 1 }, { sequence: 2 }]);
    await waitFor(() => bridgeProbes() > 0, { what: 'a probe' });
    await sleep(500);
    expect(sequences(publisher, 'backoff')).toEqual([]);
    expect(sequences(publisher, 'backoff2')).toEqual([]);
    // The retry delivers 1 then 2 with no base; 1 of `backoff` comes due, then 3 is a real gap.
    await waitFor(() => sequences(publisher, 'backoff2').length === 2, { timeoutMs: 10_000, what: 'retry' });
    expect(publisher.received.filter((m) => m.aggregateId === 'backoff2').map((m) => m.sequenceBase)).toEqual(
      [undefined, undefined],
    );
    await waitFor(() => sequences(publisher, 'backoff').length === 2, { timeoutMs: 10_000, what: 'backoff' });
    expect(publisher.received.filter((m) => m.aggregateId === 'backoff').map((m) => m.sequenceBase)).toEqual([
      undefined,
      2,
    ]);
  });

  it('no bridge while an earlier event is dead, blocking its aggregate or not', async () => {
    const publisher = new RecordingPublisher();
    publisher.verdict = (m) =>
      m.aggregateId === 'poison' && m.sequence === 1
        ? { ok: false, retryable: false, error: new PublishError('refused', { retryable: false }) }
        : { ok: true };
    await insert('poison', [{ sequence: 1 }, { sequence: 2 }]);
    // Dead without a blocked aggregate (an operator cleared the block by hand): only the probe holds 2.
    await insert('unblocked', [{ sequence: 1, status: 'dead' }, { sequence: 2 }]);
    await relay(publisher, { gapGraceMs: 50 }).start();
    await waitFor(async () => (await rowsOf('poison'))[0]?.status === 'dead', { what: 'poison dead' });
    await waitFor(() => bridgeProbes() > 0, { what: 'a probe' });
    await sleep(500);
    expect(sequences(publisher, 'poison')).toEqual([]);
    expect(sequences(publisher, 'unblocked')).toEqual([]);
    expect(relays[0]!.stats().gapsBridged).toBe(0);
  });

  it('default-sequence aggregates are unaffected: nothing held, no probe, no base', async () => {
    const publisher = new RecordingPublisher();
    await put(
      Array.from({ length: 60 }, (_, i) => ({
        aggregateType: 'order',
        aggregateId: `d${i % 6}`,
        type: 't',
        payload: i,
      })),
    );
    const r = relay(publisher, { gapGraceMs: 1, batchSize: 7 });
    await r.start();
    await waitFor(() => publisher.received.length === 60, { what: '60 published' });
    await sleep(300);
    expect(bridgeProbes()).toBe(0);
    expect(r.stats()).toMatchObject({ gapsBridged: 0, dead: 0 });
    expect(publisher.received.every((m) => m.sequenceBase === undefined)).toBe(true);
  });
});

/** Each message through the envelope into a fresh `strict` inbox: the statuses it answered. */
async function strictInbox(messages: readonly OutboxMessage[]): Promise<string[]> {
  const inbox = createInbox({
    pool: db.pool,
    consumer: `strict-${randomUUID().slice(0, 8)}`,
    schema: db.schema,
  });
  const statuses: string[] = [];
  for (const m of messages) {
    const received = fromEnvelope(envelopeHeaders(m, 'test'), m.payload);
    statuses.push((await inbox.handle(received, async () => {})).status);
  }
  return statuses;
}
