/**
 * The ordering gate with no per-event write (015_previous_id.sql, docs/schema.md, The ordering
 * gate): each event `enqueue` writes names its aggregate's previous event, the claim probes the
 * primary key for it, and delivering an event writes nothing but its DELETE. Events gated by
 * sequence (written before migration 15, or after a writer that does not keep the chain) are
 * delivered in order beside them: a live outbox upgrades in place.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { enqueue } from '../../src/producer/enqueue.js';
import { ONE_SEQUENCE_CTES } from '../../src/producer/enqueue-sql.js';
import type { OutboxMessage } from '../../src/publishers/contract.js';
import { CLAIM_SQL } from '../../src/relay/claim/claim-sql.js';
import { createRelay, type Relay } from '../../src/relay/polling/relay.js';
import { migrate, migrationSql } from '../../src/schema/migrate.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

const dbs: TestDb[] = [];
const relays: Relay[] = [];
afterEach(async () => {
  await Promise.all(relays.splice(0).map((r) => r.stop({ timeout: 2000 })));
});
afterAll(async () => {
  await Promise.all(dbs.map((d) => d.close()));
});

function relay(db: TestDb, publisher: RecordingPublisher): Relay {
  const r = createRelay({ pool: db.pool, publisher, schema: db.schema, pollIntervalMs: 50, gapGraceMs: 300 });
  relays.push(r);
  return r;
}

const event = (aggregateId: string, n: number) => ({
  aggregateType: 'order',
  aggregateId,
  type: 'order.changed',
  payload: { n },
});

/** Per aggregate, the sequences in the order the publisher acknowledged them. */
function sequencesOf(received: readonly OutboxMessage[]): Map<string, number[]> {
  const by = new Map<string, number[]>();
  for (const m of received) {
    const list = by.get(m.aggregateId) ?? [];
    list.push(m.sequence);
    by.set(m.aggregateId, list);
  }
  return by;
}

const count = async (db: TestDb, table: string): Promise<number> =>
  Number((await db.pool.query(`SELECT count(*) AS n FROM "${db.schema}".${table}`)).rows[0].n);

describe('the chained ordering gate', () => {
  it('delivers every aggregate in order and writes no aggregate_progress row for events that name their previous one', async () => {
    const db = await createTestDb('chained_gate');
    dbs.push(db);
    const publisher = new RecordingPublisher();
    relay(db, publisher).start();
    // 4 writers at once over 12 aggregates: single events and batches, while the relay runs.
    await Promise.all(
      Array.from({ length: 4 }, (_, w) =>
        (async () => {
          for (let i = 0; i < 15; i++) {
            await inTransaction(db.pool, async (tx) => {
              if (i % 3 === 0) {
                const a = `o${(w + i) % 12}`;
                await enqueue(tx, [event(a, i), event(`o${(w + i + 1) % 12}`, i), event(a, i)], {
                  schema: db.schema,
                });
              } else await enqueue(tx, event(`o${(w * 5 + i) % 12}`, i), { schema: db.schema });
            });
          }
        })(),
      ),
    );
    const written = 4 * (5 * 3 + 10);
    await waitFor(() => publisher.received.length >= written && count(db, 'events').then((n) => n === 0), {
      what: 'every event delivered',
    });
    expect(publisher.received).toHaveLength(written);
    for (const [aggregate, sequences] of sequencesOf(publisher.received))
      expect(sequences, aggregate).toEqual(sequences.map((_, i) => i + 1));
    expect(await count(db, 'aggregate_progress')).toBe(0);
  });

  it('a failing event holds back its own aggregate only, and it follows in order once it goes through', async () => {
    const db = await createTestDb('chained_gate_fail');
    dbs.push(db);
    const publisher = new RecordingPublisher();
    let refusals = 3;
    publisher.verdict = (m) =>
      m.aggregateId === 'bad' && m.sequence === 2 && refusals-- > 0
        ? { ok: false, retryable: true, error: new Error('refused for now') }
        : { ok: true };
    for (let i = 1; i <= 4; i++)
      await inTransaction(db.pool, (tx) =>
        enqueue(tx, [event('bad', i), event('good', i)], { schema: db.schema }),
      );
    relay(db, publisher).start();
    await waitFor(() => sequencesOf(publisher.received).get('good')?.length === 4, {
      what: 'the good aggregate',
    });
    expect(sequencesOf(publisher.received).get('bad')).toEqual([1]);
    await waitFor(() => count(db, 'events').then((n) => n === 0), {
      what: 'the bad aggregate',
      timeoutMs: 30_000,
    });
    expect(sequencesOf(publisher.received).get('bad')).toEqual([1, 2, 3, 4]);
  });

  it('the claim returns none of the events behind a dead head: not the next (its previous is dead), nor the later ones (the head blocks its aggregate)', async () => {
    const db = await createTestDb('chained_gate_dead', { partitions: 1 });
    dbs.push(db);
    const S = `"${db.schema}"`;
    await inTransaction(db.pool, (tx) =>
      enqueue(tx, [1, 2, 3, 4, 5].map((n) => event('stuck', n)).concat(event('free', 1)), {
        schema: db.schema,
      }),
    );
    await db.pool.query(
      `UPDATE ${S}.partitions SET owner = 't', epoch = 1, lease_until = now() + interval '1 hour'`,
    );
    const claim = async () =>
      (
        await db.pool.query<{ aggregate_id: string; sequence: string }>(
          CLAIM_SQL.replaceAll('{{schema}}', S),
          [[0], ['1'], 't', 100, [], [], '0', []],
        )
      ).rows.map((r) => `${r.aggregate_id}/${r.sequence}`);
    expect(await claim()).toEqual(['stuck/1', 'stuck/2', 'stuck/3', 'stuck/4', 'stuck/5', 'free/1']);
    // The relay's outcome for a dead head: the row dead, its aggregate blocked for good.
    await db.pool.query(
      `UPDATE ${S}.events SET status = 'dead', dead_at = now() WHERE aggregate_id = 'stuck' AND sequence = 1`,
    );
    await db.pool.query(
      `INSERT INTO ${S}.aggregate_progress (aggregate_type, aggregate_id, blocked_until) VALUES ('order', 'stuck', 'infinity')`,
    );
    expect(await claim()).toEqual(['free/1']);
  });

  it('the claim probes each row’s previous event: it reads one batch of the backlog, never hashes or sorts it', async () => {
    const db = await createTestDb('chained_gate_plan');
    dbs.push(db);
    const S = `"${db.schema}"`;
    // 4,000 pending events over 1,000 aggregates, the first 2,000 delivered: every pending row's
    // previous event is gone, as in a drain.
    for (let k = 0; k < 4; k++)
      await inTransaction(db.pool, (tx) =>
        enqueue(
          tx,
          Array.from({ length: 1000 }, (_, i) => event(`p${i}`, k)),
          { schema: db.schema },
        ),
      );
    await db.pool.query(`DELETE FROM ${S}.events WHERE id < (SELECT min(id) + 2000 FROM ${S}.events)`);
    await db.pool.query(`ANALYZE ${S}.events`);
    await db.pool.query(
      `UPDATE ${S}.partitions SET owner = 't', epoch = 1, lease_until = now() + interval '1 hour'`,
    );
    const all = Array.from({ length: 16 }, (_, i) => i);
    const client = await db.pool.connect();
    try {
      await client.query('SET enable_seqscan = off; SET enable_bitmapscan = off');
      const { rows } = await client.query({
        text: `EXPLAIN (ANALYZE, FORMAT JSON) ${CLAIM_SQL.replaceAll('{{schema}}', S)}`,
        values: [all, all.map(() => '1'), 't', 100, [], [], '0', []],
      });
      interface Node {
        'Node Type': string;
        'Relation Name'?: string;
        'Actual Rows': number;
        'Actual Loops': number;
        Plans?: Node[];
      }
      const nodes: Node[] = [];
      const walk = (n: Node) => {
        nodes.push(n);
        for (const c of n.Plans ?? []) walk(c);
      };
      walk((rows[0] as { 'QUERY PLAN': Array<{ Plan: Node }> })['QUERY PLAN'][0]!.Plan);
      expect(nodes.filter((n) => ['Sort', 'Hash', 'Hash Join'].includes(n['Node Type']))).toEqual([]);
      const read = nodes
        .filter((n) => n['Relation Name'] === 'events')
        .map((n) => n['Actual Rows'] * n['Actual Loops']);
      expect(Math.max(...read)).toBeLessThanOrEqual(100);
    } finally {
      await client.query('RESET ALL');
      client.release();
    }
  });

  it('an event that committed after the claims passed its id is found by the next claim, not the next full scan, when its successor comes', async () => {
    const db = await createTestDb('chained_gate_late');
    dbs.push(db);
    const publisher = new RecordingPublisher();
    // Full scans (which would find it) only every 60 s.
    const r = createRelay({ pool: db.pool, publisher, schema: db.schema, pollIntervalMs: 60_000 });
    relays.push(r);
    await r.start();
    // A transaction draws the first event's id and stays open while later ids are claimed.
    const late = await db.pool.connect();
    try {
      await late.query('BEGIN');
      await enqueue(late, event('late', 1), { schema: db.schema });
      for (let i = 0; i < 5; i++) {
        await inTransaction(db.pool, (tx) => enqueue(tx, event(`other${i}`, 1), { schema: db.schema }));
        await waitFor(() => publisher.received.length === i + 1, { what: `other${i}` });
      }
      await late.query('COMMIT');
    } finally {
      late.release();
    }
    const started = Date.now();
    await inTransaction(db.pool, (tx) => enqueue(tx, event('late', 2), { schema: db.schema }));
    await waitFor(() => sequencesOf(publisher.received).get('late')?.length === 2, {
      what: 'the late event and its successor',
      timeoutMs: 10_000,
    });
    expect(sequencesOf(publisher.received).get('late')).toEqual([1, 2]);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('writers creating one aggregate at once draw its ids in sequence order, single events and batches alike', async () => {
    const db = await createTestDb('chained_gate_create', { max: 12 });
    dbs.push(db);
    const S = `"${db.schema}"`;
    for (let round = 0; round < 25; round++) {
      const id = `new-${round}`;
      // Six transactions, each started before any writes: every one finds no sequence row.
      await Promise.all(
        Array.from({ length: 6 }, (_, w) =>
          inTransaction(db.pool, async (tx) => {
            await tx.query('SELECT 1');
            if (w % 2 === 0) await enqueue(tx, event(id, w), { schema: db.schema });
            else
              await enqueue(tx, [event(id, w), event(`${id}-other`, w), event(id, w)], { schema: db.schema });
          }),
        ),
      );
      const { rows } = await db.pool.query<{ sequence: number; previous_id: string; id: string }>(
        `SELECT e.id::text AS id, e.sequence::int AS sequence, e.previous_id::text AS previous_id
         FROM ${S}.events e WHERE e.aggregate_id = $1 ORDER BY e.id`,
        [id],
      );
      expect(
        rows.map((r) => r.sequence),
        `round ${round}`,
      ).toEqual(rows.map((_, i) => i + 1));
      // Each names the one before it.
      expect(rows.map((r) => r.previous_id)).toEqual(['0', ...rows.slice(0, -1).map((r) => r.id)]);
    }
  });

  it('upgrades a live outbox: events of the producer before version 15, pending across the migration and interleaved with new ones, are delivered in order', async () => {
    const schema = `t_chained_upgrade_${randomBytes(4).toString('hex')}`;
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 10 });
    const db: TestDb = {
      pool,
      schema,
      async close() {
        await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await pool.end();
      },
    };
    dbs.push(db);
    const S = `"${schema}"`;
    // The schema as version 14 left it.
    await pool.query(`CREATE SCHEMA ${S}`);
    await pool.query(
      `CREATE TABLE ${S}.migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    for (const m of migrationSql({ schema, partitions: 4 }).filter((m) => m.version <= 14)) {
      await pool.query(m.sql);
      await pool.query(`INSERT INTO ${S}.migrations (version, name) VALUES ($1, $2)`, [m.version, m.name]);
    }
    // The producer before version 15: its one-event statement (the sequence CTEs WAL mode still
    // uses, and the event row without previous_id).
    const oldProducer = `${ONE_SEQUENCE_CTES.replaceAll('{{schema}}', S)}
INSERT INTO ${S}.events (event_id, partition, aggregate_type, aggregate_id, sequence, sequence_base,
  event_type, schema_version, topic, payload, payload_bytes, headers, deliver_after, next_attempt_at)
SELECT $1::uuid, part.p, $2, $3, seq.last_sequence, seq.sequence_base, $4::text, $5::int, $6::text, $7::jsonb,
       $8::bytea, $9::jsonb, $10::timestamptz, now()
FROM seq CROSS JOIN part`;
    const old = (aggregateId: string, n: number) =>
      pool.query(oldProducer, [
        randomUUID(),
        'order',
        aggregateId,
        'order.changed',
        1,
        null,
        JSON.stringify({ n }),
        null,
        '{}',
        null,
      ]);
    const aggregates = ['u1', 'u2', 'u3'];
    for (let n = 1; n <= 3; n++) for (const a of aggregates) await old(a, n);
    // The relay before version 15 delivered each aggregate's first event: deleted, progress kept.
    await pool.query(`DELETE FROM ${S}.events WHERE sequence = 1`);
    await pool.query(
      `INSERT INTO ${S}.aggregate_progress (aggregate_type, aggregate_id, delivered_sequence) SELECT 'order', a, 1 FROM unnest($1::text[]) AS a`,
      [aggregates],
    );
    // Migration 15 with events pending; then new producers beside old ones (a rolling upgrade).
    expect((await migrate(pool, { schema })).applied).toEqual([15]);
    const current = (a: string, n: number) =>
      inTransaction(pool, (tx) => enqueue(tx, event(a, n), { schema }));
    for (const a of aggregates) {
      await current(a, 4);
      await current(a, 5);
      await old(a, 6);
      await current(a, 7);
      await inTransaction(pool, (tx) => enqueue(tx, [event(a, 8), event(a, 9)], { schema }));
    }
    const { rows } = await pool.query<{ sequence: number; previous_id: string | null }>(
      `SELECT sequence::int, previous_id::text FROM ${S}.events WHERE aggregate_id = 'u1' ORDER BY sequence`,
    );
    // Pending from before (2, 3), the first after them (4) and the first after an old one (7):
    // gated by sequence; the others name their previous event.
    expect(rows.map((r) => [r.sequence, r.previous_id === null])).toEqual([
      [2, true],
      [3, true],
      [4, true],
      [5, false],
      [6, true],
      [7, true],
      [8, false],
      [9, false],
    ]);
    const publisher = new RecordingPublisher();
    relay(db, publisher).start();
    await waitFor(() => count(db, 'events').then((n) => n === 0), {
      what: 'every event delivered',
      timeoutMs: 30_000,
    });
    for (const a of aggregates)
      expect(sequencesOf(publisher.received).get(a), a).toEqual([2, 3, 4, 5, 6, 7, 8, 9]);
  });
});
