import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { enqueue } from '../../src/producer/enqueue.js';
import { createTestDb, inTransaction, type TestDb } from '../helpers/db.js';

let db: TestDb;
beforeAll(async () => {
  db = await createTestDb('enqueue');
});
afterAll(async () => {
  await db?.close();
});

const count = async (): Promise<number> =>
  Number((await db.pool.query(`SELECT count(*) AS n FROM "${db.schema}".events`)).rows[0].n);

describe('enqueue', () => {
  it('writes an event in the caller transaction with sequence, partition, event id', async () => {
    const result = await inTransaction(db.pool, (tx) =>
      enqueue(
        tx,
        { aggregateType: 'order', aggregateId: 'a1', type: 'order.created', payload: { total: 10 } },
        { schema: db.schema },
      ),
    );
    expect(result.sequence).toBe(1);
    expect(result.eventId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-/);
    const { rows } = await db.pool.query(
      `SELECT event_id::text, partition, sequence::int, payload, schema_version, status FROM "${db.schema}".events WHERE event_id = $1`,
      [result.eventId],
    );
    expect(rows[0]).toMatchObject({
      sequence: 1,
      payload: { total: 10 },
      schema_version: 1,
      status: 'pending',
    });
    expect(rows[0].partition).toBeGreaterThanOrEqual(0);
    expect(rows[0].partition).toBeLessThan(16);
  });

  it('rolled-back transaction leaves no row and no sequence', async () => {
    const before = await count();
    await expect(
      inTransaction(db.pool, async (tx) => {
        await enqueue(
          tx,
          { aggregateType: 'order', aggregateId: 'rb', type: 't', payload: 1 },
          { schema: db.schema },
        );
        throw new Error('business rule failed');
      }),
    ).rejects.toThrow('business rule failed');
    expect(await count()).toBe(before);
    const r = await inTransaction(db.pool, (tx) =>
      enqueue(
        tx,
        { aggregateType: 'order', aggregateId: 'rb', type: 't', payload: 1 },
        { schema: db.schema },
      ),
    );
    expect(r.sequence).toBe(1);
  });

  it('batch of 1,000 is one statement with gap-free per-aggregate sequences', async () => {
    const events = Array.from({ length: 1000 }, (_, i) => ({
      aggregateType: 'cart',
      aggregateId: `c${i % 7}`,
      type: 'cart.item_added',
      payload: { i },
    }));
    const client = await db.pool.connect();
    let statements = 0;
    const original = client.query.bind(client);
    (client as unknown as { query: unknown }).query = (...args: unknown[]) => {
      statements += 1;
      return (original as (...a: unknown[]) => unknown)(...args);
    };
    try {
      await original('BEGIN');
      const results = await enqueue(client, events, { schema: db.schema });
      await original('COMMIT');
      expect(statements).toBe(1);
      expect(results).toHaveLength(1000);
      const perAggregate = new Map<string, number[]>();
      results.forEach((r, i) => {
        const key = events[i]!.aggregateId;
        perAggregate.set(key, [...(perAggregate.get(key) ?? []), r.sequence]);
      });
      for (const seqs of perAggregate.values()) {
        expect(seqs).toEqual(seqs.map((_, k) => k + 1));
      }
    } finally {
      client.release();
    }
  });

  it('concurrent writers of one aggregate get distinct, gap-free sequences', async () => {
    const results = await Promise.all(
      Array.from({ length: 20 }, () =>
        inTransaction(db.pool, (tx) =>
          enqueue(
            tx,
            { aggregateType: 'acct', aggregateId: 'hot', type: 't', payload: {} },
            { schema: db.schema },
          ),
        ),
      ),
    );
    expect(results.map((r) => r.sequence).sort((a, b) => a - b)).toEqual(
      Array.from({ length: 20 }, (_, i) => i + 1),
    );
  });

  it('stores bytes payloads as bytes and carries headers', async () => {
    const r = await inTransaction(db.pool, (tx) =>
      enqueue(
        tx,
        {
          aggregateType: 'file',
          aggregateId: 9,
          type: 'file.uploaded',
          payload: Buffer.from([0, 1, 2, 255]),
          headers: { 'x-tenant': 'acme' },
          topic: 'files.uploaded',
          schemaVersion: 3,
        },
        { schema: db.schema },
      ),
    );
    const { rows } = await db.pool.query(
      `SELECT payload, payload_bytes, headers, topic, schema_version, aggregate_id FROM "${db.schema}".events WHERE event_id = $1`,
      [r.eventId],
    );
    expect(rows[0].payload).toBeNull();
    expect([...rows[0].payload_bytes]).toEqual([0, 1, 2, 255]);
    expect(rows[0]).toMatchObject({
      headers: { 'x-tenant': 'acme' },
      topic: 'files.uploaded',
      schema_version: 3,
    });
    expect(rows[0].aggregate_id).toBe('9');
  });

  it('the same aggregate always lands in the same partition', async () => {
    const a = await inTransaction(db.pool, (tx) =>
      enqueue(
        tx,
        [
          { aggregateType: 'p', aggregateId: 'same', type: 't', payload: 1 },
          { aggregateType: 'p', aggregateId: 'same', type: 't', payload: 2 },
        ],
        { schema: db.schema },
      ),
    );
    const { rows } = await db.pool.query(
      `SELECT DISTINCT partition FROM "${db.schema}".events WHERE event_id = ANY($1::uuid[])`,
      [a.map((x) => x.eventId)],
    );
    expect(rows).toHaveLength(1);
  });
});

describe('wake-up', () => {
  async function notificationsDuring(fn: () => Promise<unknown>): Promise<number> {
    const listener = await db.pool.connect();
    let count = 0;
    const onNotification = () => {
      count += 1;
    };
    listener.on('notification', onNotification);
    try {
      await listener.query(`LISTEN "txo_${db.schema}"`);
      await fn();
      await new Promise((r) => setTimeout(r, 150));
      return count;
    } finally {
      await listener.query('UNLISTEN *');
      listener.removeListener('notification', onNotification);
      listener.release();
    }
  }
  const one = { aggregateType: 'w', aggregateId: 'x', type: 't', payload: 1 };

  it('sends no NOTIFY while no relay sleeps (a busy relay costs producers nothing)', async () => {
    await db.pool.query(`UPDATE "${db.schema}".partitions SET sleeping = false`);
    const n = await notificationsDuring(() =>
      inTransaction(db.pool, async (tx) => {
        await enqueue(tx, one, { schema: db.schema });
        await enqueue(tx, [one, { ...one, aggregateId: 'y' }], { schema: db.schema });
      }),
    );
    expect(n).toBe(0);
  });

  it('sends one NOTIFY per transaction when the partition owner sleeps, none with notify: false', async () => {
    await db.pool.query(`UPDATE "${db.schema}".partitions SET sleeping = true`);
    try {
      const n = await notificationsDuring(() =>
        inTransaction(db.pool, async (tx) => {
          await enqueue(tx, one, { schema: db.schema });
          await enqueue(tx, [one, { ...one, aggregateId: 'y' }], { schema: db.schema });
        }),
      );
      expect(n).toBe(1);
      const quiet = await notificationsDuring(() =>
        inTransaction(db.pool, (tx) => enqueue(tx, one, { schema: db.schema, notify: false })),
      );
      expect(quiet).toBe(0);
    } finally {
      await db.pool.query(`UPDATE "${db.schema}".partitions SET sleeping = false`);
    }
  });

  it("NOTIFYs only when its own partition's owner sleeps: new-aggregate, known-aggregate and caller-version statements", async () => {
    type Tx = Parameters<typeof enqueue>[0];
    // Every partition but the event's sleeps, or the event's alone.
    const sleep = (aggregateId: string, own: boolean) =>
      db.pool.query(
        `UPDATE "${db.schema}".partitions SET sleeping = ((partition = "${db.schema}".partition_of('w', $1)) = $2)`,
        [aggregateId, own],
      );
    let version = 0;
    try {
      for (const own of [false, true]) {
        const id = `own-${own}`;
        await sleep(id, own);
        const paths = [
          // An aggregate the process has not written, then the same one again (the known-aggregate statement).
          (tx: Tx) =>
            enqueue(
              tx,
              { aggregateType: 'w', aggregateId: id, type: 't', payload: 1 },
              { schema: db.schema },
            ),
          (tx: Tx) =>
            enqueue(
              tx,
              { aggregateType: 'w', aggregateId: id, type: 't', payload: 2 },
              { schema: db.schema },
            ),
        ];
        for (const path of paths)
          expect(await notificationsDuring(() => inTransaction(db.pool, path))).toBe(own ? 1 : 0);
        // A caller version: the event row only.
        const versioned = `own-v-${own}`;
        await sleep(versioned, own);
        version += 1;
        const n = await notificationsDuring(() =>
          inTransaction(db.pool, (tx) =>
            enqueue(
              tx,
              { aggregateType: 'w', aggregateId: versioned, type: 't', payload: 3, sequence: version },
              { schema: db.schema },
            ),
          ),
        );
        expect(n).toBe(own ? 1 : 0);
      }
    } finally {
      await db.pool.query(`UPDATE "${db.schema}".partitions SET sleeping = false`);
    }
  });
});

describe('enqueue refuses bad input, naming the field, and writes nothing', () => {
  const cases: Array<[string, unknown, string]> = [
    ['missing aggregateId', { aggregateType: 'o', type: 't', payload: {} }, 'event.aggregateId'],
    [
      'empty aggregateType',
      { aggregateType: '', aggregateId: 'x', type: 't', payload: {} },
      'event.aggregateType',
    ],
    ['missing type', { aggregateType: 'o', aggregateId: 'x', payload: {} }, 'event.type'],
    [
      'BigInt payload',
      { aggregateType: 'o', aggregateId: 'x', type: 't', payload: { n: 1n } },
      'event.payload.n',
    ],
    [
      'function payload',
      { aggregateType: 'o', aggregateId: 'x', type: 't', payload: () => 1 },
      'event.payload',
    ],
    [
      'NUL in payload',
      { aggregateType: 'o', aggregateId: 'x', type: 't', payload: { s: 'a\u0000' } },
      'event.payload.s',
    ],
    [
      'topic with a space',
      { aggregateType: 'o', aggregateId: 'x', type: 't', payload: 1, topic: 'a b' },
      'event.topic',
    ],
    [
      'bad schemaVersion',
      { aggregateType: 'o', aggregateId: 'x', type: 't', payload: 1, schemaVersion: 0 },
      'event.schemaVersion',
    ],
    [
      'bad eventId',
      { aggregateType: 'o', aggregateId: 'x', type: 't', payload: 1, eventId: 'nope' },
      'event.eventId',
    ],
    [
      'header not a string',
      { aggregateType: 'o', aggregateId: 'x', type: 't', payload: 1, headers: { a: 1 } },
      'event.headers["a"]',
    ],
  ];
  for (const [name, event, field] of cases) {
    it(name, async () => {
      const before = await count();
      const error = await inTransaction(db.pool, (tx) =>
        enqueue(tx, event as never, { schema: db.schema }),
      ).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxValidationError);
      expect(error).toBeInstanceOf(TypeError);
      expect((error as OutboxValidationError).field).toBe(field);
      expect((error as Error).message).toContain(field);
      expect(await count()).toBe(before);
    });
  }

  it('payload over the limit', async () => {
    const error = await inTransaction(db.pool, (tx) =>
      enqueue(
        tx,
        { aggregateType: 'o', aggregateId: 'x', type: 't', payload: 'x'.repeat(200) },
        {
          schema: db.schema,
          maxPayloadBytes: 100,
        },
      ),
    ).catch((e: unknown) => e);
    expect((error as OutboxValidationError).field).toBe('event.payload');
    expect((error as Error).message).toMatch(/over the limit of 100/);
  });

  it('one bad event in a batch writes none of the batch', async () => {
    const before = await count();
    const error = await inTransaction(db.pool, (tx) =>
      enqueue(
        tx,
        [
          { aggregateType: 'o', aggregateId: 'ok', type: 't', payload: 1 },
          { aggregateType: 'o', aggregateId: '', type: 't', payload: 1 },
        ],
        { schema: db.schema },
      ),
    ).catch((e: unknown) => e);
    expect((error as OutboxValidationError).field).toBe('events[1].aggregateId');
    expect(await count()).toBe(before);
  });

  it('refuses a client outside a transaction, and a pool', async () => {
    const client = await db.pool.connect();
    try {
      await expect(
        enqueue(
          client,
          { aggregateType: 'o', aggregateId: 'x', type: 't', payload: 1 },
          { schema: db.schema },
        ),
      ).rejects.toThrow(/not inside a transaction/);
    } finally {
      client.release();
    }
    await expect(
      enqueue(
        db.pool,
        { aggregateType: 'o', aggregateId: 'x', type: 't', payload: 1 },
        { schema: db.schema },
      ),
    ).rejects.toThrow(/Pool/);
  });

  it('refuses an unsafe schema name', async () => {
    await expect(
      inTransaction(db.pool, (tx) =>
        enqueue(
          tx,
          { aggregateType: 'o', aggregateId: 'x', type: 't', payload: 1 },
          { schema: 'x"; drop table y; --' },
        ),
      ),
    ).rejects.toThrow(/schema/);
  });
});

describe('enqueue refuses text PostgreSQL cannot store', () => {
  it('a lone surrogate in the payload or in an id names the field and writes nothing', async () => {
    for (const [event, field] of [
      [{ aggregateType: 'o', aggregateId: 'x', type: 't', payload: { s: 'a\ud800b' } }, 'event.payload.s'],
      [{ aggregateType: 'o', aggregateId: 'x\udc00', type: 't', payload: 1 }, 'event.aggregateId'],
    ] as const) {
      const error = await inTransaction(db.pool, (tx) => enqueue(tx, event, { schema: db.schema })).catch(
        (e: unknown) => e,
      );
      expect((error as OutboxValidationError).field).toBe(field);
      expect((error as Error).message).toMatch(/surrogate/);
    }
    // A proper pair is fine.
    await inTransaction(db.pool, (tx) =>
      enqueue(
        tx,
        { aggregateType: 'o', aggregateId: 'emoji', type: 't', payload: { s: '😀' } },
        { schema: db.schema },
      ),
    );
  });

  it('refuses a schema name too long for its wake-up channel', async () => {
    await expect(
      inTransaction(db.pool, (tx) =>
        enqueue(
          tx,
          { aggregateType: 'o', aggregateId: 'x', type: 't', payload: 1 },
          { schema: 's'.repeat(60) },
        ),
      ),
    ).rejects.toThrow(/1-58 characters/);
  });
});

describe('a schema older than the library', () => {
  it('enqueue says to run migrate, naming what is missing, and writes nothing', async () => {
    const old = await createTestDb('enqueue_old');
    try {
      // What a schema at version 8 lacks.
      await old.pool.query(`DROP FUNCTION "${old.schema}".partition_of`);
      const one = { aggregateType: 'o', aggregateId: '1', type: 't', payload: {} };
      for (const input of [one, [one, one]]) {
        const error = await inTransaction(old.pool, (tx) =>
          enqueue(tx, input as never, { schema: old.schema }),
        ).catch((e: unknown) => e);
        expect(error).toMatchObject({ code: 'TXO_SCHEMA_OUTDATED' });
        expect((error as Error).message).toMatch(
          /no partition_of\(\) \(migration 9\).*run tx-outbox migrate/,
        );
      }
      expect((await old.pool.query(`SELECT count(*)::int AS n FROM "${old.schema}".events`)).rows[0].n).toBe(
        0,
      );
    } finally {
      await old.close();
    }
  });
});

describe('an aggregate pruned since this process last wrote it', () => {
  it('continues above the floor, one event, as a new aggregate would', async () => {
    const s = `"${db.schema}"`;
    const e = { aggregateType: 'pruned', aggregateId: 'p1', type: 't', payload: {} };
    const first = await inTransaction(db.pool, (tx) => enqueue(tx, e, { schema: db.schema }));
    const second = await inTransaction(db.pool, (tx) => enqueue(tx, e, { schema: db.schema }));
    expect([first.sequence, second.sequence]).toEqual([1, 2]);
    // What the pruner does (docs/schema.md, Bounded tables): raise the floor, delete the row.
    await db.pool.query(
      `SELECT setval('${s}.sequence_floor', greatest(last_value, 100)) FROM ${s}.sequence_floor`,
    );
    await db.pool.query(`DELETE FROM ${s}.aggregate_sequences WHERE aggregate_type = 'pruned'`);
    const third = await inTransaction(db.pool, (tx) => enqueue(tx, e, { schema: db.schema }));
    const fourth = await inTransaction(db.pool, (tx) => enqueue(tx, e, { schema: db.schema }));
    const floor = Number(
      (await db.pool.query(`SELECT last_value FROM ${s}.sequence_floor`)).rows[0].last_value,
    );
    expect([third.sequence, fourth.sequence]).toEqual([floor + 1, floor + 2]);
    const { rows } = await db.pool.query(
      `SELECT sequence::int, sequence_base::int FROM ${s}.events WHERE aggregate_type = 'pruned' ORDER BY id`,
    );
    expect(rows).toEqual([
      { sequence: 1, sequence_base: 0 },
      { sequence: 2, sequence_base: 0 },
      { sequence: floor + 1, sequence_base: floor },
      { sequence: floor + 2, sequence_base: floor },
    ]);
  });
});
