import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enqueue, transactions } from '../../src/adapters/postgres-js.js';
import { OutboxError, OutboxValidationError } from '../../src/errors.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { type AdapterHarness, adapterConformance } from './conformance.js';

type Tx = postgres.TransactionSql;

/** postgres.js on its own connections; `prepare` as postgres() takes it (default true). */
function harness(name: string, prepare: boolean): AdapterHarness<Tx> {
  return {
    name,
    enqueue,
    unawaitedEnqueueUndetected:
      'postgres.js queues the statement on the connection behind the ROLLBACK and has no hook at the send',
    async open(url, schema) {
      const sql = postgres(url, { max: 8, prepare, onnotice: () => undefined });
      const reserved = await sql.reserve();
      return {
        transaction: (fn) => sql.begin(fn) as Promise<never>,
        async insertBusiness(tx, id, note) {
          await tx`INSERT INTO ${tx(schema)}.business (id, note) VALUES (${id}, ${note ?? null})`;
        },
        async readPrepared(tx, id) {
          const rows = await tx<{ note: string }[]>`SELECT note FROM ${tx(schema)}.business WHERE id = ${id}`;
          return rows[0]?.note;
        },
        nonTransactional: () => [sql, reserved],
        transactions: () => transactions(sql),
        async close() {
          reserved.release();
          await sql.end();
        },
      };
    },
  };
}

adapterConformance(harness('postgres_js', true), DATABASE_URL);
adapterConformance(harness('postgres_js_unprepared', false), DATABASE_URL);

describe('postgres.js specifics', () => {
  let db: TestDb;
  let sql: postgres.Sql;
  const event = (id: string, extra: Record<string, unknown> = {}) => ({
    aggregateType: 'order',
    aggregateId: id,
    type: 'order.placed',
    payload: {} as unknown,
    ...extra,
  });

  beforeAll(async () => {
    db = await createTestDb('adapter_postgres_js_more');
    await db.pool.query(`CREATE TABLE "${db.schema}".business (id text PRIMARY KEY, note text)`);
    sql = postgres(DATABASE_URL, { max: 4, onnotice: () => undefined });
  });
  afterAll(async () => {
    await sql?.end();
    await db?.close();
  });

  it('binds caller versions, one and a batch (bigint[])', async () => {
    const results = await sql.begin(async (tx) => [
      await enqueue(tx, event('versioned-1', { sequence: 7 }), { schema: db.schema }),
      ...(await enqueue(
        tx,
        [event('versioned-2', { sequence: 2 ** 53 - 2 }), event('versioned-2', { sequence: 2 ** 53 - 1 })],
        { schema: db.schema },
      )),
    ]);
    expect(results.map((r) => r.sequence)).toEqual([7, 2 ** 53 - 2, 2 ** 53 - 1]);
  });

  it('binds bytea[] with a Buffer first and nulls, jsonb[] and timestamptz[] exactly', async () => {
    const at = new Date('2031-02-03T04:05:06.789Z');
    const blob = Buffer.from([0x5c, 0x22, 0x00, 0xff]); // a backslash and a quote, raw
    const results = await sql.begin((tx) =>
      enqueue(
        tx,
        [
          event('bind', { payload: blob, deliverAfter: at, headers: { 'x-q': 'a "b" \\ c' } }),
          event('bind', { payload: { s: '{"x":[1,2]}', n: null, u: 'ü\\"' } }),
          event('bind', { payload: null }),
          event('bind', { payload: Buffer.alloc(0) }),
        ],
        { schema: db.schema },
      ),
    );
    expect(results.map((r) => r.sequence)).toEqual([1, 2, 3, 4]);
    const { rows } = await db.pool.query(
      `SELECT payload, payload_bytes, headers, deliver_after FROM "${db.schema}".events
       WHERE aggregate_id = 'bind' ORDER BY sequence`,
    );
    expect(Buffer.from(rows[0].payload_bytes)).toEqual(blob);
    expect(rows[0].payload).toBeNull();
    expect(rows[0].headers).toMatchObject({ 'x-q': 'a "b" \\ c' });
    expect(new Date(rows[0].deliver_after).getTime()).toBe(at.getTime());
    expect(rows[1].payload).toEqual({ s: '{"x":[1,2]}', n: null, u: 'ü\\"' });
    expect(rows[1].payload_bytes).toBeNull();
    expect(rows[1].deliver_after).toBeNull();
    expect(rows[2].payload).toBeNull(); // JSON null, stored as SQL NULL or jsonb null
    expect(Buffer.from(rows[3].payload_bytes)).toEqual(Buffer.alloc(0));
  });

  it('binds one event exactly: a JSON string payload stays an object, bytes stay bytes', async () => {
    await sql.begin(async (tx) => {
      await enqueue(tx, event('one-json', { payload: { a: [1, 'two'] } }), { schema: db.schema });
      await enqueue(tx, event('one-bytes', { payload: Buffer.from('\\x00') }), { schema: db.schema });
    });
    const { rows } = await db.pool.query(
      `SELECT aggregate_id, jsonb_typeof(payload) AS kind, payload, payload_bytes FROM "${db.schema}".events
       WHERE aggregate_id LIKE 'one-%' ORDER BY aggregate_id`,
    );
    expect(rows[0].payload_bytes.toString()).toBe('\\x00');
    expect(rows[1].kind).toBe('object');
    expect(rows[1].payload).toEqual({ a: [1, 'two'] });
  });

  it('prepares the statement unless prepared: false or postgres({ prepare: false })', async () => {
    // Unprepared itself (simple protocol), and not matching its own text.
    const preparedCount = (tx: postgres.TransactionSql) =>
      tx
        .unsafe(`SELECT count(*)::int AS n FROM pg_prepared_statements
          WHERE statement LIKE '%.events (id, previous_id, event_id%' AND statement NOT LIKE '%pg_prepared_statements%'`)
        .then((r) => Number(r[0]!['n']));
    const unprepared = postgres(DATABASE_URL, { max: 1, prepare: false, onnotice: () => undefined });
    const fresh = postgres(DATABASE_URL, { max: 1, onnotice: () => undefined });
    try {
      expect(
        await fresh.begin(async (tx) => {
          await enqueue(tx, event('prep-off'), { schema: db.schema, prepared: false });
          return preparedCount(tx);
        }),
      ).toBe(0);
      expect(
        await fresh.begin(async (tx) => {
          await enqueue(tx, event('prep-on'), { schema: db.schema });
          return preparedCount(tx);
        }),
      ).toBe(1);
      expect(
        await unprepared.begin(async (tx) => {
          await enqueue(tx, [event('prep-never'), event('prep-never')], { schema: db.schema });
          await enqueue(tx, event('prep-never'), { schema: db.schema });
          return preparedCount(tx);
        }),
      ).toBe(0);
    } finally {
      await unprepared.end();
      await fresh.end();
    }
  });

  it('refuses the root sql and a reserved connection, naming sql.begin', async () => {
    const reserved = await sql.reserve();
    try {
      for (const handle of [sql, reserved, {}, null]) {
        const error = await enqueue(handle as never, event('refused'), { schema: db.schema }).catch(
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(OutboxValidationError);
        expect((error as OutboxValidationError).field).toBe('tx');
        expect((error as Error).message).toContain('sql.begin(');
      }
    } finally {
      reserved.release();
    }
  });

  it('transactions() refuses a transaction and an instance with a transform', async () => {
    const camel = postgres(DATABASE_URL, { max: 1, transform: postgres.camel });
    try {
      expect(() => transactions(camel)).toThrow(OutboxValidationError);
      await sql.begin(async (tx) => {
        expect(() => transactions(tx as never)).toThrow(/postgres\(\) instance/);
      });
    } finally {
      await camel.end();
    }
  });

  it('runs READ COMMITTED, commits, rolls back, and returns what fn returned', async () => {
    const runner = transactions(sql);
    expect(runner.name).toBe('postgres-js');
    const level = await runner.transaction(async (tx, exec) => {
      await tx`INSERT INTO ${tx(db.schema)}.business (id) VALUES ('rc-1')`;
      await exec.query({
        text: `INSERT INTO "${db.schema}".business (id, note) VALUES ($1, $2)`,
        values: ['rc-2', null],
      });
      return (
        await exec.query<{ l: string }>({
          text: "SELECT current_setting('transaction_isolation') AS l",
          values: [],
        })
      ).rows[0]!.l;
    });
    expect(level).toBe('read committed');
    expect(await runner.transaction(async () => [1, 2])).toEqual([1, 2]);
    await expect(
      runner.transaction(async (tx) => {
        await tx`INSERT INTO ${tx(db.schema)}.business (id) VALUES ('rc-3')`;
        throw new Error('no');
      }),
    ).rejects.toThrow('no');
    const { rows } = await runner.sql.query<{ id: string }>({
      text: `SELECT id FROM "${db.schema}".business WHERE id LIKE 'rc-%' ORDER BY id`,
      values: [],
    });
    expect(rows.map((r) => r.id)).toEqual(['rc-1', 'rc-2']);
  });

  it("enqueues on the runner's tx, the guarded proxy a handler gets, and in its savepoint", async () => {
    const results = await transactions(sql).transaction(async (tx) => [
      await enqueue(tx, event('guarded'), { schema: db.schema }),
      await tx.savepoint((sp) => enqueue(sp, event('guarded'), { schema: db.schema })),
    ]);
    expect(results.map((r) => r.sequence)).toEqual([1, 2]);
  });

  it('rejects with abortedTransaction() when fn swallowed a failed statement, committing nothing', async () => {
    const runner = transactions(sql);
    const error = await runner
      .transaction(async (tx) => {
        await tx`INSERT INTO ${tx(db.schema)}.business (id) VALUES ('ab-1')`;
        await tx`INSERT INTO ${tx(db.schema)}.business (id) VALUES ('ab-1')`.catch(() => undefined);
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxError);
    expect((error as OutboxError).code).toBe('TXO_TRANSACTION_ABORTED');
    expect(
      Number(
        (await db.pool.query(`SELECT count(*) AS n FROM "${db.schema}".business WHERE id = 'ab-1'`)).rows[0]
          .n,
      ),
    ).toBe(0);
  });

  it('survives a connection lost under the handler: the runner rejects, nothing else is sent', async () => {
    // postgres.js 3.4.9 throws an uncaught TypeError for a statement sent on a closed connection
    // (vitest fails the file on it), and its sql.end() then never returns.
    const own = postgres(DATABASE_URL, { max: 2, onnotice: () => undefined });
    const runner = transactions(own);
    const terminate = (pid: number) => db.pool.query('SELECT pg_terminate_backend($1)', [pid]);
    const pidOf = async (tx: postgres.TransactionSql) =>
      (await tx<{ pid: number }[]>`SELECT pg_backend_pid() AS pid`)[0]!.pid;
    try {
      // Under a running statement, the handler going on after its error.
      const running = await runner
        .transaction(async (tx) => {
          const pid = await pidOf(tx);
          const sleeping = tx`SELECT pg_sleep(5)`.then(
            () => undefined,
            (e: unknown) => e,
          );
          await new Promise((resolve) => setTimeout(resolve, 100));
          await terminate(pid);
          await sleeping;
          await tx`SELECT 1`;
        })
        .catch((e: unknown) => e);
      expect(['57P01', 'ECONNRESET']).toContain(runner.errorCode(running));
      // Idle, inside a savepoint.
      const idle = await runner
        .transaction(async (tx) =>
          tx.savepoint(async (sp) => {
            await terminate(await pidOf(sp as postgres.TransactionSql));
            // Long enough for postgres.js to see the socket close, even on a loaded machine: a
            // statement written before it does is the library's uncaught TypeError (above).
            await new Promise((resolve) => setTimeout(resolve, 1000));
            await sp`SELECT 1`;
          }),
        )
        .catch((e: unknown) => e);
      expect(runner.errorCode(idle)).toBe('ECONNRESET');
      // postgres.js 3.4.9 fails the first statement on the connection that replaced the one ended
      // under a statement with that statement's stale 57P01: the inbox redelivers on it.
      const seven = () => runner.transaction(async (tx) => (await tx`SELECT 7 AS n`)[0]!['n']);
      expect(await seven().catch((e: unknown) => (runner.errorCode(e) === '57P01' ? seven() : e))).toBe(7);
      expect(await seven()).toBe(7);
      await new Promise((resolve) => setTimeout(resolve, 100));
    } finally {
      await own.end({ timeout: 5 });
    }
  });

  it("charges the handler's own network failure: its connection was fine, and is rolled back", async () => {
    const runner = transactions(sql);
    const refused = Object.assign(new Error('connect ECONNREFUSED 10.0.0.1:443'), { code: 'ECONNREFUSED' });
    const error = await runner
      .transaction(async (tx) => {
        await tx`INSERT INTO ${tx(db.schema)}.business (id) VALUES ('own-1')`;
        throw refused;
      })
      .catch((e: unknown) => e);
    expect(error).toBe(refused);
    expect(runner.errorCode(error)).toBeUndefined();
    expect(
      Number(
        (await db.pool.query(`SELECT count(*) AS n FROM "${db.schema}".business WHERE id = 'own-1'`)).rows[0]
          .n,
      ),
    ).toBe(0);
  });

  it('errorCode reads SQLSTATEs, and postgres.js connection codes as Node network codes', async () => {
    const runner = transactions(sql);
    const conflict = await runner
      .transaction((_tx, exec) =>
        exec.query({ text: `DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40001'; END $$`, values: [] }),
      )
      .catch((e: unknown) => e);
    expect(runner.errorCode(conflict)).toBe('40001');
    const killed = await runner
      .transaction(async (_tx, exec) => {
        const { rows } = await exec.query<{ pid: number }>({
          text: 'SELECT pg_backend_pid() AS pid',
          values: [],
        });
        await db.pool.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
        // Let postgres.js see the socket close first: a query written in the very tick it closes
        // hits a race of postgres.js 3.4.9 (an uncaught TypeError in its nextWrite).
        await new Promise((resolve) => setTimeout(resolve, 200));
        await exec.query({ text: 'SELECT 1', values: [] });
      })
      .catch((e: unknown) => e);
    expect(['57P01', 'ECONNRESET']).toContain(runner.errorCode(killed));
    const ended = postgres(DATABASE_URL, { max: 1 });
    await ended.end();
    const after = await ended`SELECT 1`.catch((e: unknown) => e);
    expect(transactions(ended).errorCode(after)).toBe('ECONNRESET');
    expect(runner.errorCode(new Error('plain'))).toBeUndefined();
  });
});
