/**
 * pg-boss 10 used as an outbox: the producer inserts one job per event with `insert(jobs,
 * { db })`, the `db` adapter running pg-boss's SQL on the producer's client inside its
 * business transaction; `work()` handlers publish each batch to JetStream.
 *
 * Settings: `batchSize` 1000 and `pollingIntervalSeconds: 0.5` (the minimum pg-boss accepts).
 * A pg-boss worker waits out the polling interval after every fetch that took less than it,
 * even a full one, so one worker tops out near batchSize / 0.5 s. `relays` > 1 adds workers.
 *
 * Per-aggregate order is NOT held. pg-boss has nothing cheap for it: the `singleton` queue
 * policy with `singletonKey` = aggregate id allows one *active* job per key, but a batch
 * fetch keeps an arbitrary one of the jobs of a key it sees (`row_number()` over the key
 * without an ORDER BY), so a later event can go first; measured with 5,000 events over 500
 * aggregates and batchSize 1000 (even with time-ordered UUIDv7 job ids): 1,245 events out of
 * order, at half the throughput. Only batchSize 1 would keep FIFO per key, i.e. 2 jobs/s.
 */
import PgBoss from 'pg-boss';
import type { BenchContext, DrainResult, DrainSystem, DrainWorkload } from '../types.js';
import { benchEvent, inChunks } from '../workload.js';
import { AckCounter, type Broker, ident, inTransaction, openBroker, subjectOf } from './shared.js';

export interface PgBossOptions {
  /** Jobs per fetch. Default 1000. */
  readonly batchSize?: number;
}

interface JobData {
  readonly subject: string;
  readonly event: unknown;
}

const QUEUE = 'outbox';

export function pgBossSystem(options: PgBossOptions = {}): DrainSystem {
  const batchSize = options.batchSize ?? 1000;
  let boss: PgBoss | undefined;
  let broker: Broker | undefined;
  let lastError: Error | undefined;
  const schemaOf = (ctx: BenchContext) => `${ctx.schema}_pgboss`;

  async function started(ctx: BenchContext): Promise<PgBoss> {
    if (boss !== undefined) return boss;
    const instance = new PgBoss({ connectionString: ctx.databaseUrl, schema: schemaOf(ctx), max: 10 });
    instance.on('error', (error) => {
      lastError = error;
    });
    await instance.start();
    boss = instance;
    return instance;
  }

  return {
    name: 'pg-boss',

    async load(ctx: BenchContext, workload: DrainWorkload): Promise<void> {
      const b = await started(ctx);
      await b.createQueue(QUEUE, { name: QUEUE, policy: 'standard' });
      await inChunks(workload.events, 1000, (from, count) =>
        inTransaction(ctx.pool, async (client) => {
          const jobs = Array.from({ length: count }, (_, k) => {
            const event = benchEvent(from + k, workload.aggregates, workload.payloadBytes);
            const data: JobData = { subject: subjectOf(ctx, event), event: event.payload };
            return { name: QUEUE, data };
          });
          await b.insert(jobs, { db: { executeSql: (text, values) => client.query(text, values) } });
        }),
      );
    },

    async drain(ctx: BenchContext, workload: DrainWorkload): Promise<DrainResult> {
      const b = await started(ctx);
      const js = await openBroker(ctx);
      broker = js;
      const acks = new AckCounter(workload.events);
      const handler = async (jobs: PgBoss.Job<JobData>[]) => {
        await Promise.all(
          jobs.map(async (job) => {
            await js.publish(job.data.subject, JSON.stringify(job.data.event), job.id);
            acks.ack(job.id);
          }),
        );
      };
      for (let r = 0; r < workload.relays; r++) {
        await b.work<JobData>(QUEUE, { batchSize, pollingIntervalSeconds: 0.5 }, handler);
      }
      try {
        return await acks.done();
      } catch (error) {
        throw lastError === undefined
          ? error
          : new Error(`${String(error)}; last pg-boss error: ${lastError}`);
      }
    },

    async teardown(ctx: BenchContext): Promise<void> {
      await boss?.stop({ graceful: true, wait: true, timeout: 10_000 });
      boss = undefined;
      lastError = undefined;
      await broker?.close();
      broker = undefined;
      await ctx.pool.query(`DROP SCHEMA IF EXISTS ${ident(schemaOf(ctx))} CASCADE`);
    },
  };
}
