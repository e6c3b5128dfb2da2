/**
 * W3 through an ORM: the same one-row business transaction as W3 (bench/workloads/producer.ts),
 * written through Drizzle (node-postgres driver) or Prisma 7 (@prisma/adapter-pg) — business row
 * and bare INSERT through the ORM's query builder / model API, or business row + `enqueue` through
 * `tx-outbox/drizzle` / `tx-outbox/prisma` — from 8 concurrent transactions, interleaved rounds.
 */
import { sql as drizzleSql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { bigserial, jsonb, pgSchema } from 'drizzle-orm/pg-core';
import pg from 'pg';
import { enqueue as drizzleEnqueue } from '../../src/adapters/drizzle.js';
import { enqueue as prismaEnqueue } from '../../src/adapters/prisma.js';
import { migrate } from '../../src/index.js';
import { benchContext, DATABASE_URL } from '../lib.js';

export const ORM_PRODUCER_VARIANTS = [
  'Drizzle: business + bare INSERT',
  'Drizzle: business + enqueue',
  'Prisma: business + bare INSERT',
  'Prisma: business + enqueue',
] as const;
export type OrmProducerVariant = (typeof ORM_PRODUCER_VARIANTS)[number];

type Step = (worker: number, n: number) => Promise<unknown>;

export async function ormProducerRuns(
  pool: pg.Pool,
  options: { seconds: number; rounds: number; connections?: number },
): Promise<Record<OrmProducerVariant, number[]>> {
  const connections = options.connections ?? 8;
  const ctx = await benchContext(pool);
  const s = `"${ctx.schema}"`;
  const ormPool = new pg.Pool({ connectionString: DATABASE_URL, max: connections });
  const { PrismaClient } = await import('../../.tmp/prisma-bench/client.js');
  const { PrismaPg } = await import('@prisma/adapter-pg');
  const prisma = new PrismaClient({
    adapter: new PrismaPg({ connectionString: DATABASE_URL, max: connections }, { schema: ctx.schema }),
  });
  try {
    await migrate(pool, { schema: ctx.schema });
    await pool.query(`CREATE TABLE ${s}.orders (id bigserial PRIMARY KEY, payload jsonb NOT NULL)`);
    await pool.query(`CREATE TABLE ${s}.bare (id bigserial PRIMARY KEY, payload jsonb NOT NULL)`);
    const schema = pgSchema(ctx.schema);
    const orders = schema.table('orders', {
      id: bigserial('id', { mode: 'number' }).primaryKey(),
      payload: jsonb('payload').notNull(),
    });
    const bare = schema.table('bare', {
      id: bigserial('id', { mode: 'number' }).primaryKey(),
      payload: jsonb('payload').notNull(),
    });
    const db = drizzle(ormPool);
    await db.execute(drizzleSql`SELECT 1`);
    const payload = { sku: 'ABC-123', quantity: 2, note: 'x'.repeat(200) };
    const topic = `${ctx.subjectPrefix}.order.placed`;
    const event = (w: number, n: number) => ({
      aggregateType: 'order',
      aggregateId: `c${w}-${n % 500}`,
      type: 'order.placed',
      topic,
      payload,
    });
    const steps: Record<OrmProducerVariant, Step> = {
      'Drizzle: business + bare INSERT': () =>
        db.transaction(async (tx) => {
          await tx.insert(orders).values({ payload });
          await tx.insert(bare).values({ payload });
        }),
      'Drizzle: business + enqueue': (w, n) =>
        db.transaction(async (tx) => {
          await tx.insert(orders).values({ payload });
          await drizzleEnqueue(tx, event(w, n), { schema: ctx.schema });
        }),
      'Prisma: business + bare INSERT': () =>
        prisma.$transaction(async (tx) => {
          await tx.orders.create({ data: { payload }, select: { id: true } });
          await tx.bare.create({ data: { payload }, select: { id: true } });
        }),
      'Prisma: business + enqueue': (w, n) =>
        prisma.$transaction(async (tx) => {
          await tx.orders.create({ data: { payload }, select: { id: true } });
          await prismaEnqueue(tx, event(w, n), { schema: ctx.schema });
        }),
    };
    async function round(variant: OrmProducerVariant): Promise<number> {
      const until = performance.now() + options.seconds * 1000;
      const counts = await Promise.all(
        Array.from({ length: connections }, async (_, w) => {
          let n = 0;
          while (performance.now() < until) {
            await steps[variant](w, n);
            n += 1;
          }
          return n;
        }),
      );
      return counts.reduce((a, b) => a + b, 0) / options.seconds;
    }
    const result = Object.fromEntries(
      ORM_PRODUCER_VARIANTS.map((v) => [v, [] as number[]]),
    ) as unknown as Record<OrmProducerVariant, number[]>;
    for (let r = 0; r < options.rounds; r++) {
      for (const v of ORM_PRODUCER_VARIANTS) {
        result[v].push(await round(v));
        await pool.query(`TRUNCATE ${s}.events, ${s}.orders, ${s}.bare`);
      }
    }
    return result;
  } finally {
    await prisma.$disconnect();
    await ormPool.end();
    await ctx.close();
  }
}
