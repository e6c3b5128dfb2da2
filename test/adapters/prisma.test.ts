/**
 * `tx-outbox/prisma` on Prisma 7 with the adapter-pg driver adapter, on the real PostgreSQL. The
 * client is generated from test/adapters/prisma/schema.prisma into .tmp/prisma-client by
 * `npm run generate:prisma` (part of `npm run typecheck` and so of `npm test`).
 */
import { createHash } from 'node:crypto';
import { PrismaPg } from '@prisma/adapter-pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Prisma, PrismaClient } from '../../.tmp/prisma-client/client.js';
import { enqueue, prismaErrorCode, transactions } from '../../src/adapters/prisma.js';
import { OutboxValidationError } from '../../src/errors.js';
import { databaseFault } from '../../src/inbox/faults.js';
import { createInbox } from '../../src/inbox/inbox.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { DATABASE_URL } from '../helpers/env.js';
import { adapterConformance } from './conformance.js';

type Tx = Prisma.TransactionClient;

/** A client on `schema`; Prisma's own statements prepared under names, to share the connection. */
function open(schema: string, pg: { options?: string } = {}): PrismaClient {
  const adapter = new PrismaPg(
    { connectionString: DATABASE_URL, ...pg },
    { schema, statementNameGenerator: (q) => `prisma_${createHash('sha1').update(q.sql).digest('hex')}` },
  );
  return new PrismaClient({ adapter });
}

adapterConformance<Tx>(
  {
    name: 'prisma',
    enqueue,
    async open(_url, schema) {
      const prisma = open(schema);
      return {
        transaction: (fn) => prisma.$transaction(fn),
        async insertBusiness(tx, id, note) {
          await tx.business.create({ data: { id, note: note ?? null } });
        },
        async readPrepared(tx, id) {
          return (await tx.business.findUnique({ where: { id } }))?.note ?? undefined;
        },
        nonTransactional: () => [prisma, prisma.$extends({})],
        transactions: () => transactions(prisma),
        close: () => prisma.$disconnect(),
      };
    },
  },
  DATABASE_URL,
);

describe('prisma adapter, beyond the conformance suite', () => {
  let db: TestDb;
  let prisma: PrismaClient;
  beforeAll(async () => {
    db = await createTestDb('adapter_prisma_more');
    await db.pool.query(`CREATE TABLE "${db.schema}".business (id text PRIMARY KEY, note text)`);
    prisma = open(db.schema);
  });
  afterAll(async () => {
    await prisma?.$disconnect();
    await db?.close();
  });

  it('refuses the PrismaClient at compile time and at run time, naming the fix', async () => {
    const error = await enqueue(
      // @ts-expect-error the PrismaClient is not an interactive transaction's tx
      prisma,
      { aggregateType: 'order', aggregateId: 'root', type: 'order.placed', payload: {} },
      { schema: db.schema },
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).field).toBe('tx');
    expect((error as Error).message).toContain('prisma.$transaction(async (tx)');
  });

  it('keeps deliverAfter exact when the session TimeZone is not UTC', async () => {
    const newYork = open(db.schema, { options: '-c TimeZone=America/New_York' });
    try {
      const later = new Date(Date.now() + 3_600_000);
      const event = { aggregateType: 'order', aggregateId: 'tz', type: 'order.later', payload: {} };
      await newYork.$transaction(async (tx) => {
        await enqueue(tx, { ...event, deliverAfter: later }, { schema: db.schema });
        await enqueue(
          tx,
          [
            { ...event, deliverAfter: later },
            { ...event, deliverAfter: later },
          ],
          { schema: db.schema },
        );
      });
      const { rows } = await db.pool.query(
        `SELECT deliver_after FROM "${db.schema}".events WHERE aggregate_id = 'tz' ORDER BY id`,
      );
      expect(rows.map((r) => (r.deliver_after as Date).getTime())).toEqual([
        later.getTime(),
        later.getTime(),
        later.getTime(),
      ]);
    } finally {
      await newYork.$disconnect();
    }
  });

  it('rolls back an inbox transaction that outlives its timeout option', async () => {
    const runner = transactions(prisma, { timeout: 200 });
    const error = await runner
      .transaction(async (tx) => {
        await tx.business.create({ data: { id: 'slow' } });
        await new Promise((r) => setTimeout(r, 400));
      })
      .catch((e: unknown) => e);
    expect((error as { code?: unknown }).code).toBe('P2028');
    expect(await prisma.business.count({ where: { id: 'slow' } })).toBe(0);
  });

  it('refuses bad runner options and a transaction in place of the client', async () => {
    expect(() => transactions(prisma, { timeout: 0 })).toThrow(OutboxValidationError);
    expect(() => transactions(prisma, { maxWait: 1.5 })).toThrow(OutboxValidationError);
    await prisma.$transaction(async (tx) => {
      // @ts-expect-error a transaction has no $connect
      expect(() => transactions(tx)).toThrow(OutboxValidationError);
    });
  });

  it("finds the SQLSTATE under Prisma's errors, never a P code", async () => {
    const raw = await prisma.$queryRawUnsafe('SELECT 1/0').catch((e: unknown) => e);
    expect((raw as { code?: unknown }).code).toBe('P2010');
    expect(prismaErrorCode(raw)).toBe('22012');
    expect(prismaErrorCode({ code: 'P2034', meta: {} })).toBe('40001');
    expect(prismaErrorCode({ code: 'P2010', meta: { code: '40P01', message: 'deadlock' } })).toBe('40P01');
    expect(prismaErrorCode({ code: 'P2025', meta: {} })).toBeUndefined();
    expect(prismaErrorCode({ code: 'P0001', message: 'raised by PL/pgSQL' })).toBe('P0001');
    // A handler's own call to a service that is down is its failure, not the database's.
    expect(prismaErrorCode(Object.assign(new Error('refused'), { code: 'ECONNREFUSED' }))).toBeUndefined();
  });

  it("reports the loss of the transaction's connection as a database fault", async () => {
    const runner = transactions(prisma);
    const kill = (pid: number) => db.pool.query('SELECT pg_terminate_backend($1)', [pid]);
    const pidOf = async (tx: Tx) =>
      (await tx.$queryRawUnsafe<{ pid: number }[]>('SELECT pg_backend_pid() AS pid'))[0]!.pid;
    // Terminated under a statement: the server's 57P01, wrapped by Prisma.
    const during = await runner
      .transaction(async (tx) => {
        const pid = await pidOf(tx);
        const sleeping = tx.$queryRawUnsafe('SELECT pg_sleep(5)::text');
        await new Promise((r) => setTimeout(r, 200));
        await kill(pid);
        await sleeping;
      })
      .catch((e: unknown) => e);
    // The server's FATAL 57P01 when it arrives before the socket closes; pg's own "connection
    // terminated" (08006) when the close wins the race. Either is a lost connection to the inbox.
    expect(['57P01', '08006']).toContain(runner.errorCode(during));
    expect(databaseFault(runner.errorCode(during))).toBe('lost');
    // Terminated between statements: pg's own error, passed through without a code.
    const between = await runner
      .transaction(async (tx) => {
        await kill(await pidOf(tx));
        await new Promise((r) => setTimeout(r, 200));
        await tx.business.create({ data: { id: 'after-loss' } });
      })
      .catch((e: unknown) => e);
    expect(between).toBeInstanceOf(Error);
    expect(runner.errorCode(between)).toBe('08006');
    expect(await runner.transaction(async (tx) => pidOf(tx))).toBeGreaterThan(0);

    // The inbox redelivers (rejects) rather than charging the handler an attempt.
    const inbox = createInbox({ transactions: runner, consumer: 'lost', schema: db.schema });
    const handled = await inbox
      .handle(
        {
          eventId: crypto.randomUUID(),
          type: 'order.placed',
          aggregateType: 'order',
          aggregateId: 'lost',
          sequence: 1,
          schemaVersion: 1,
          contentType: 'application/json',
          payload: Buffer.from('{}'),
          headers: {},
        },
        async (tx) => {
          await kill(await pidOf(tx));
          await new Promise((r) => setTimeout(r, 200));
          await tx.business.create({ data: { id: 'lost-in-handler' } });
        },
      )
      .catch((e: unknown) => e);
    expect(handled).toBeInstanceOf(Error);
    expect(runner.errorCode(handled)).toBe('08006');
  });
});
