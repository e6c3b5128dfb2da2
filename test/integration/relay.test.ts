import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { brokerUnavailable, PublishError } from '../../src/errors.js';
import { listDead, replayDead } from '../../src/ops/dead-letter.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import { createRelay, type Relay } from '../../src/relay/polling/relay.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

let db: TestDb;
const relays: Relay[] = [];
beforeAll(async () => {
  db = await createTestDb('relay');
});
afterEach(async () => {
  await Promise.all(relays.splice(0).map((r) => r.stop({ timeout: 2000 })));
  await db.pool.query(`DELETE FROM "${db.schema}".events`);
});
afterAll(async () => {
  await db?.close();
});

function relay(publisher: RecordingPublisher, extra: Partial<Parameters<typeof createRelay>[0]> = {}): Relay {
  const r = createRelay({
    pool: db.pool,
    publisher,
    schema: db.schema,
    pollIntervalMs: 50,
    leaseMs: 3000,
    ...extra,
  });
  relays.push(r);
  return r;
}

async function put(events: OutboxEvent[]): Promise<void> {
  await inTransaction(db.pool, (tx) => enqueue(tx, events, { schema: db.schema }));
}

async function pending(): Promise<number> {
  const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".events`);
  return rows[0].n;
}

describe('polling relay', () => {
  it('delivers every committed event once and empties the hot table', async () => {
    const publisher = new RecordingPublisher();
    await put(
      Array.from({ length: 300 }, (_, i) => ({
        aggregateType: 'o',
        aggregateId: `a${i % 10}`,
        type: 't',
        payload: { i },
      })),
    );
    const r = relay(publisher, { batchSize: 64 });
    await r.start();
    await waitFor(() => publisher.received.length === 300, { what: '300 deliveries' });
    await waitFor(async () => (await pending()) === 0, { what: 'empty outbox' });
    expect(new Set(publisher.received.map((m) => m.eventId)).size).toBe(300);
    expect(r.stats().published).toBe(300);
  });

  it('never publishes the event of a rolled-back transaction', async () => {
    const publisher = new RecordingPublisher();
    const r = relay(publisher);
    await r.start();
    await expect(
      inTransaction(db.pool, async (tx) => {
        await enqueue(
          tx,
          { aggregateType: 'o', aggregateId: 'rb', type: 'gone', payload: 1 },
          { schema: db.schema },
        );
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    await put([{ aggregateType: 'o', aggregateId: 'rb', type: 'kept', payload: 2 }]);
    await waitFor(() => publisher.received.length === 1);
    await new Promise((res) => setTimeout(res, 200));
    expect(publisher.received.map((m) => [m.type, m.sequence])).toEqual([['kept', 1]]);
  });

  it('keeps per-aggregate order, across batches and waves', async () => {
    const publisher = new RecordingPublisher();
    for (let k = 0; k < 5; k++) {
      await put(
        Array.from({ length: 40 }, (_, i) => ({
          aggregateType: 'o',
          aggregateId: `b${i % 4}`,
          type: 't',
          payload: { k, i },
        })),
      );
    }
    relay(publisher, { batchSize: 7 }).start();
    await waitFor(() => publisher.received.length === 200);
    const last = new Map<string, number>();
    for (const m of publisher.received) {
      expect(m.sequence).toBe((last.get(m.aggregateId) ?? 0) + 1);
      last.set(m.aggregateId, m.sequence);
    }
  });

  it('passes envelope fields and payload bytes through', async () => {
    const publisher = new RecordingPublisher();
    await put([
      {
        aggregateType: 'order',
        aggregateId: 'x',
        type: 'order.placed',
        payload: { a: [1, 2] },
        topic: 'orders',
        schemaVersion: 2,
        headers: { h: 'v' },
      },
      { aggregateType: 'blob', aggregateId: 'y', type: 'blob.put', payload: Buffer.from([7, 8, 9]) },
    ]);
    relay(publisher).start();
    await waitFor(() => publisher.received.length === 2);
    const order = publisher.received.find((m) => m.aggregateType === 'order')!;
    expect(JSON.parse(Buffer.from(order.payload).toString())).toEqual({ a: [1, 2] });
    expect(order).toMatchObject({
      topic: 'orders',
      schemaVersion: 2,
      headers: { h: 'v' },
      contentType: 'application/json',
      sequence: 1,
    });
    const blob = publisher.received.find((m) => m.aggregateType === 'blob')!;
    expect([...blob.payload]).toEqual([7, 8, 9]);
    expect(blob.contentType).toBe('application/octet-stream');
  });

  it('a poison event backs off, goes dead after max attempts, and blocks only its aggregate', async () => {
    const publisher = new RecordingPublisher();
    const attempts: number[] = [];
    publisher.verdict = (m) => {
      if (m.aggregateId === 'poison' && m.sequence === 1) {
        attempts.push(Date.now());
        return { ok: false, retryable: true, error: new PublishError('broker says no', { retryable: true }) };
      }
      return { ok: true };
    };
    await put([
      { aggregateType: 'o', aggregateId: 'poison', type: 't', payload: 1 },
      { aggregateType: 'o', aggregateId: 'poison', type: 't', payload: 2 },
      ...Array.from({ length: 20 }, (_, i) => ({
        aggregateType: 'o',
        aggregateId: `ok${i}`,
        type: 't',
        payload: i,
      })),
    ]);
    const r = relay(publisher, { maxAttempts: 4, backoff: { baseMs: 40, capMs: 200 } });
    await r.start();
    await waitFor(() => publisher.received.length === 20, { what: 'healthy aggregates delivered' });
    await waitFor(
      async () => {
        const { rows } = await db.pool.query(
          `SELECT status FROM "${db.schema}".events WHERE sequence = 1 AND aggregate_id = 'poison'`,
        );
        return rows[0]?.status === 'dead';
      },
      { what: 'poison event dead' },
    );
    const { rows } = await db.pool.query(
      `SELECT sequence::int, status, attempts, last_error FROM "${db.schema}".events WHERE aggregate_id = 'poison' ORDER BY sequence`,
    );
    expect(rows).toEqual([
      { sequence: 1, status: 'dead', attempts: 4, last_error: 'broker says no' },
      { sequence: 2, status: 'pending', attempts: 0, last_error: null },
    ]);
    expect(attempts).toHaveLength(4);
    expect(publisher.received.some((m) => m.aggregateId === 'poison')).toBe(false);
    expect(r.stats()).toMatchObject({ dead: 1, retried: 3 });
    // Later events of other aggregates still flow while the dead one stays blocked.
    await put([{ aggregateType: 'o', aggregateId: 'late', type: 't', payload: 0 }]);
    await waitFor(() => publisher.received.some((m) => m.aggregateId === 'late'));
    expect(publisher.received.some((m) => m.aggregateId === 'poison')).toBe(false);
  });

  it("a dead aggregate's queued events never crowd out the others (small batches)", async () => {
    const publisher = new RecordingPublisher();
    publisher.verdict = (m) =>
      m.aggregateId === 'stuck'
        ? { ok: false, retryable: false, error: new Error('rejected') }
        : { ok: true };
    await put(
      Array.from({ length: 40 }, (_, i) => ({
        aggregateType: 'o',
        aggregateId: 'stuck',
        type: 't',
        payload: i,
      })),
    );
    await put(
      Array.from({ length: 12 }, (_, i) => ({
        aggregateType: 'o',
        aggregateId: `free${i}`,
        type: 't',
        payload: i,
      })),
    );
    relay(publisher, { batchSize: 4 }).start();
    await waitFor(() => publisher.received.length === 12, {
      what: 'the free aggregates, past 39 blocked events',
    });
    // The last batch's outcome is recorded after its publish returns (pipelined): wait for it.
    let left: unknown;
    await waitFor(
      async () => {
        const { rows } = await db.pool.query(
          `SELECT count(*) FILTER (WHERE status = 'dead')::int AS dead, count(*)::int AS n FROM "${db.schema}".events`,
        );
        left = rows[0];
        return rows[0].n === 40;
      },
      { what: 'the free events to be recorded delivered' },
    ).catch(() => undefined);
    expect(left).toEqual({ dead: 1, n: 40 });
  });

  it('an unreachable broker charges no attempt; events wait and then flow', async () => {
    const publisher = new RecordingPublisher();
    let down = true;
    publisher.verdict = () =>
      down ? { ok: false, retryable: true, error: brokerUnavailable('connection refused') } : { ok: true };
    await put(
      Array.from({ length: 30 }, (_, i) => ({
        aggregateType: 'o',
        aggregateId: `u${i % 3}`,
        type: 't',
        payload: i,
      })),
    );
    const r = relay(publisher, { maxAttempts: 1 });
    await r.start();
    await waitFor(() => r.stats().unavailable >= 6, { what: 'several refused publishes' });
    const { rows } = await db.pool.query(
      `SELECT max(attempts)::int AS a, count(*)::int AS n FROM "${db.schema}".events`,
    );
    expect(rows[0]).toEqual({ a: 0, n: 30 });
    down = false;
    await waitFor(() => publisher.received.length === 30);
    expect(r.stats().dead).toBe(0);
  });

  it('a publish call hanging past publishTimeoutMs charges no attempt, and the outage is logged', async () => {
    const publisher = new RecordingPublisher();
    let hang = true;
    // Hangs until the relay aborts the call (its publishTimeoutMs), like a broker that never answers.
    publisher.verdict = () => (hang ? new Promise(() => undefined) : { ok: true });
    const lines: string[] = [];
    const logger = {
      debug: () => undefined,
      info: (_: object, msg?: string) => lines.push(`info ${msg}`),
      warn: (_: object, msg?: string) => lines.push(`warn ${msg}`),
      error: (_: object, msg?: string) => lines.push(`error ${msg}`),
    };
    await put([{ aggregateType: 'o', aggregateId: 'h1', type: 't', payload: 1 }]);
    const r = relay(publisher, { maxAttempts: 1, publishTimeoutMs: 100, logger });
    await r.start();
    await waitFor(() => r.stats().unavailable >= 3, { what: 'several timed-out publishes' });
    const { rows } = await db.pool.query(
      `SELECT max(attempts)::int AS a, count(*)::int AS n FROM "${db.schema}".events`,
    );
    expect(rows[0]).toEqual({ a: 0, n: 1 });
    expect(r.stats().lastError).toMatch(/did not finish within 100 ms/);
    hang = false;
    await waitFor(() => publisher.received.length === 1);
    expect(r.stats().dead).toBe(0);
    expect(lines.filter((l) => l.startsWith('warn broker unavailable'))).toHaveLength(1);
    expect(lines).toContain('info broker available again');
  });

  it('a dead event is listed and, replayed with a reason, delivered in order with its aggregate (audited)', async () => {
    const publisher = new RecordingPublisher();
    let broken = true;
    publisher.verdict = (m) =>
      broken && m.aggregateId === 'dl'
        ? { ok: false, retryable: false, error: new Error('schema mismatch') }
        : { ok: true };
    await put([
      { aggregateType: 'o', aggregateId: 'dl', type: 't', payload: 1 },
      { aggregateType: 'o', aggregateId: 'dl', type: 't', payload: 2 },
    ]);
    relay(publisher).start();
    await waitFor(async () => (await listDead(db.pool, { schema: db.schema })).length === 1, {
      what: 'a dead event',
    });
    const [dead] = await listDead(db.pool, { schema: db.schema });
    expect(dead).toMatchObject({
      aggregateId: 'dl',
      sequence: 1,
      attempts: 1,
      lastError: 'permanent: schema mismatch',
    });
    await expect(
      replayDead(db.pool, { schema: db.schema, eventIds: [dead!.eventId], reason: ' ' }),
    ).rejects.toThrow(/reason/);
    broken = false;
    const replayed = await replayDead(db.pool, {
      schema: db.schema,
      eventIds: [dead!.eventId],
      reason: 'consumer schema fixed',
      actor: 'test',
    });
    expect(replayed).toEqual([dead!.eventId]);
    await waitFor(() => publisher.received.filter((m) => m.aggregateId === 'dl').length === 2, {
      what: 'replayed',
    });
    expect(publisher.received.filter((m) => m.aggregateId === 'dl').map((m) => m.sequence)).toEqual([1, 2]);
    const { rows } = await db.pool.query(
      `SELECT actor, action, event_ids::text[] AS ids, reason FROM "${db.schema}".audit`,
    );
    expect(rows).toContainEqual({
      actor: 'test',
      action: 'replay',
      ids: [dead!.eventId],
      reason: 'consumer schema fixed',
    });
  });

  it('a permanent error goes straight to dead', async () => {
    const publisher = new RecordingPublisher();
    publisher.verdict = () => ({ ok: false, retryable: false, error: new Error('message too large') });
    await put([{ aggregateType: 'o', aggregateId: 'big', type: 't', payload: 1 }]);
    relay(publisher).start();
    await waitFor(async () => {
      const { rows } = await db.pool.query(`SELECT status, attempts, last_error FROM "${db.schema}".events`);
      return rows[0]?.status === 'dead';
    });
    const { rows } = await db.pool.query(`SELECT attempts, last_error FROM "${db.schema}".events`);
    expect(rows[0]).toEqual({ attempts: 1, last_error: 'permanent: message too large' });
  });

  it('honours retryAfterMs from the broker', async () => {
    const publisher = new RecordingPublisher();
    let calls = 0;
    publisher.verdict = () => {
      calls += 1;
      return calls === 1
        ? { ok: false, retryable: true, error: new Error('429'), retryAfterMs: 5000 }
        : { ok: true };
    };
    await put([{ aggregateType: 'o', aggregateId: 'ra', type: 't', payload: 1 }]);
    relay(publisher, { backoff: { baseMs: 1, capMs: 60_000 } }).start();
    await waitFor(() => calls === 1);
    // The outcome is recorded after the publish returns (pipelined): wait for the attempt's row.
    let wait = Number.NaN;
    await waitFor(
      async () => {
        const { rows } = await db.pool.query(
          `SELECT extract(epoch FROM next_attempt_at - now()) AS wait FROM "${db.schema}".events WHERE attempts = 1`,
        );
        if (rows.length === 0) return false;
        wait = Number(rows[0].wait);
        return true;
      },
      { what: 'the retry to be recorded' },
    );
    expect(wait).toBeGreaterThan(4);
    expect(calls).toBe(1);
  });

  it('deliverAfter holds the event and the later events of its aggregate', async () => {
    const publisher = new RecordingPublisher();
    await put([
      {
        aggregateType: 'o',
        aggregateId: 'd',
        type: 't',
        payload: 1,
        deliverAfter: new Date(Date.now() + 1500),
      },
      { aggregateType: 'o', aggregateId: 'd', type: 't', payload: 2 },
      { aggregateType: 'o', aggregateId: 'free', type: 't', payload: 3 },
    ]);
    relay(publisher).start();
    await waitFor(() => publisher.received.length === 1);
    expect(publisher.received[0]!.aggregateId).toBe('free');
    await waitFor(() => publisher.received.length === 3, { timeoutMs: 10_000 });
    expect(publisher.received.slice(1).map((m) => m.sequence)).toEqual([1, 2]);
  });

  it('wakes on NOTIFY: an event committed while idle is delivered well before the poll interval', async () => {
    const publisher = new RecordingPublisher();
    const r = relay(publisher, { pollIntervalMs: 30_000 });
    await r.start();
    await waitFor(() => r.stats().partitions.length === 16);
    await new Promise((res) => setTimeout(res, 300));
    const t0 = Date.now();
    await put([{ aggregateType: 'o', aggregateId: 'n', type: 't', payload: 1 }]);
    await waitFor(() => publisher.received.length === 1, { timeoutMs: 5000 });
    expect(Date.now() - t0).toBeLessThan(2000);
  });

  it('an idle relay marks its partitions sleeping (producers NOTIFY only then), a busy one does not', async () => {
    const publisher = new RecordingPublisher();
    const r = relay(publisher);
    await r.start();
    const sleeping = async () =>
      (
        await db.pool.query(
          `SELECT count(*) FILTER (WHERE sleeping)::int AS n FROM "${db.schema}".partitions`,
        )
      ).rows[0].n as number;
    await waitFor(async () => (await sleeping()) === 16, { what: 'all partitions sleeping' });
    publisher.delayMs = 300;
    await put([{ aggregateType: 'o', aggregateId: 'busy', type: 't', payload: 1 }]);
    await waitFor(async () => (await sleeping()) === 0, { what: 'awake while publishing' });
    await waitFor(() => publisher.received.length === 1);
    await waitFor(async () => (await sleeping()) === 16, { what: 'asleep again' });
    await r.stop();
    expect(await sleeping()).toBe(0);
  });

  it('stop() is idempotent, releases the partitions, and start after stop is refused', async () => {
    const publisher = new RecordingPublisher();
    const r = relay(publisher);
    await r.start();
    await r.start();
    await waitFor(() => r.stats().partitions.length === 16);
    await Promise.all([r.stop(), r.stop()]);
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM "${db.schema}".partitions WHERE owner IS NOT NULL`,
    );
    expect(rows[0].n).toBe(0);
    await expect(r.start()).rejects.toThrow(/stopped/);
  });

  it('stop() closes the publisher once, after the batch in flight; closePublisher: false leaves it open', async () => {
    const closes: string[] = [];
    const owned = new RecordingPublisher();
    owned.delayMs = 300;
    owned.close = async () => {
      closes.push(`owned closed with ${owned.received.length} received`);
    };
    const shared = new RecordingPublisher();
    shared.close = async () => {
      closes.push('shared closed');
    };
    const a = relay(owned);
    const b = relay(shared, { closePublisher: false });
    await a.start();
    await waitFor(() => a.stats().partitions.length === 16);
    await put([{ aggregateType: 'o', aggregateId: 'c1', type: 't', payload: 1 }]);
    await new Promise((r) => setTimeout(r, 100)); // the batch is in flight (300 ms)
    await Promise.all([a.stop(), a.stop()]);
    expect(closes).toEqual(['owned closed with 1 received']);
    await b.start();
    await b.stop();
    expect(closes).toEqual(['owned closed with 1 received']);
    expect(() => createRelay({ pool: db.pool, publisher: owned, closePublisher: 'yes' as never })).toThrow(
      /closePublisher/,
    );
  });

  it('two relays share the partitions fairly and deliver everything in order', async () => {
    const p1 = new RecordingPublisher();
    const p2 = new RecordingPublisher();
    const a = relay(p1, { leaseMs: 600 });
    const b = relay(p2, { leaseMs: 600 });
    await a.start();
    await b.start();
    await waitFor(() => a.stats().partitions.length === 8 && b.stats().partitions.length === 8, {
      what: 'an even split',
    });
    await put(
      Array.from({ length: 400 }, (_, i) => ({
        aggregateType: 'o',
        aggregateId: `s${i % 50}`,
        type: 't',
        payload: i,
      })),
    );
    await waitFor(() => p1.received.length + p2.received.length === 400);
    expect(p1.received.length).toBeGreaterThan(0);
    expect(p2.received.length).toBeGreaterThan(0);
    for (const received of [p1.received, p2.received]) {
      const last = new Map<string, number>();
      for (const m of received) {
        expect(m.sequence).toBeGreaterThan(last.get(m.aggregateId) ?? 0);
        last.set(m.aggregateId, m.sequence);
      }
    }
    await a.stop();
    await waitFor(() => b.stats().partitions.length === 16, { what: 'takeover of released partitions' });
  });

  it('a rebalance stuck in the database holds up neither the publishing of the partitions held nor their renewal', async () => {
    const publisher = new RecordingPublisher();
    const r = relay(publisher, { leaseMs: 1500 });
    await r.start();
    await waitFor(() => r.stats().partitions.length === 16);
    // A relay row that only the rebalance's clean-up of silent relays touches (a CDC relay's: it
    // counts in no fair share), silent after 200 ms and locked by this connection: every
    // rebalance from then on waits for the lock.
    const locker = await db.pool.connect();
    try {
      await locker.query(
        `INSERT INTO "${db.schema}".relays (relay_id, host, pid, lease_ms, kind) VALUES ('silent', 'h', 1, 200, 'cdc')`,
      );
      await locker.query('BEGIN');
      await locker.query(`SELECT 1 FROM "${db.schema}".relays WHERE relay_id = 'silent' FOR UPDATE`);
      const { rows } = await locker.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      const lockerPid = rows[0]!.pid;
      await waitFor(
        async () =>
          (
            await db.pool.query(
              'SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))',
              [lockerPid],
            )
          ).rows[0].n > 0,
        { what: 'a rebalance waiting for the lock' },
      );
      // Longer than the lease: the renewals must go on while the rebalance waits.
      const renewedUntil = async () =>
        (
          await db.pool.query(
            `SELECT min(lease_until) AS t FROM "${db.schema}".partitions WHERE owner = $1`,
            [r.id],
          )
        ).rows[0].t as Date;
      const before = await renewedUntil();
      await waitFor(async () => (await renewedUntil()) > before, {
        what: 'a renewal while the rebalance waits',
      });
      await put([{ aggregateType: 'o', aggregateId: 'rebalance-stuck', type: 't', payload: 1 }]);
      await waitFor(() => publisher.received.length === 1, { what: 'published while the rebalance waits' });
      expect(r.stats().partitions).toHaveLength(16);
    } finally {
      await locker.query('ROLLBACK');
      await locker.query(`DELETE FROM "${db.schema}".relays WHERE relay_id = 'silent'`);
      locker.release();
    }
  });
});

describe('relay setup errors', () => {
  it('start() on a schema that was never migrated fails at once with the migrate hint', async () => {
    const r = createRelay({
      pool: db.pool,
      publisher: new RecordingPublisher(),
      schema: 'never_migrated_xyz',
    });
    await expect(r.start()).rejects.toThrow(/migrate/);
    await r.stop();
  });

  it('bad options name the field', () => {
    expect(() => createRelay({ pool: db.pool, publisher: new RecordingPublisher(), batchSize: 0 })).toThrow(
      /batchSize/,
    );
    expect(() => createRelay({ pool: db.pool, publisher: new RecordingPublisher(), leaseMs: 10 })).toThrow(
      /leaseMs/,
    );
    expect(() => createRelay({ pool: db.pool } as never)).toThrow(/publisher/);
  });
});

describe('relay gate under scheduled events', () => {
  it('an aggregate waiting on a deliverAfter event never blocks the others, even when its later events fill a batch', async () => {
    const publisher = new RecordingPublisher();
    await put([
      {
        aggregateType: 'o',
        aggregateId: 'later',
        type: 't',
        payload: 0,
        deliverAfter: new Date(Date.now() + 3_600_000),
      },
      ...Array.from({ length: 10 }, (_, i) => ({
        aggregateType: 'o',
        aggregateId: 'later',
        type: 't',
        payload: i + 1,
      })),
    ]);
    await put(
      Array.from({ length: 20 }, (_, i) => ({
        aggregateType: 'o',
        aggregateId: `now${i}`,
        type: 't',
        payload: i,
      })),
    );
    relay(publisher, { batchSize: 10 }).start();
    await waitFor(() => publisher.received.length === 20, {
      timeoutMs: 10_000,
      what: 'the 20 unrelated events',
    });
    expect(publisher.received.some((m) => m.aggregateId === 'later')).toBe(false);
  });

  it('warns about a held-back aggregate after it was held in 10 claims, not for 10 of its events in one claim', async () => {
    const publisher = new RecordingPublisher();
    await put([
      {
        aggregateType: 'o',
        aggregateId: 'held',
        type: 't',
        payload: 0,
        deliverAfter: new Date(Date.now() + 3_600_000),
      },
      ...Array.from({ length: 15 }, (_, i) => ({
        aggregateType: 'o',
        aggregateId: 'held',
        type: 't',
        payload: i,
      })),
    ]);
    const warnings: Array<{ obj: object; msg: string | undefined }> = [];
    const noop = (): void => undefined;
    const logger = {
      debug: noop,
      info: noop,
      error: noop,
      warn: (obj: object, msg?: string) => warnings.push({ obj, msg }),
    };
    const heldBack = () => warnings.filter((w) => w.msg?.startsWith('aggregate held back'));
    const started = Date.now();
    await relay(publisher, { pollIntervalMs: 200, logger }).start();
    await new Promise((resolve) => setTimeout(resolve, 600)); // a few claims: held, each time for 200 ms
    expect(heldBack()).toEqual([]);
    await waitFor(() => heldBack().length > 0, { timeoutMs: 10_000, what: 'the held-back warning' });
    expect(Date.now() - started).toBeGreaterThanOrEqual(9 * 200);
    expect(heldBack()[0]!.obj).toMatchObject({ aggregateId: 'held', times: 10 });
  });
});
