/**
 * graphile-worker 0.17 used as an outbox: the producer adds one job per event with
 * `add_jobs` in its business transaction; a task publishes the event to JetStream.
 *
 * Per-aggregate order: each job goes to the named queue of its aggregate (`queue_name`),
 * which graphile-worker runs one job at a time. The cost: one `_private_job_queues` row per
 * aggregate (the docs warn against high-cardinality queue names), and every job fetch locks
 * all available queue rows (`... FOR UPDATE SKIP LOCKED`), so a fetch grows with the number
 * of aggregates: measured here ~600-750 events/s at 500 aggregates, ~280 at 5,000, against
 * ~2,500-3,300 with `queuePerAggregate: false` (no order), at any concurrency. Within one business
 * transaction the jobs of an aggregate share `run_at` (= now()), so their order rests on
 * the insertion order of `add_jobs` (the job id) rather than on a documented tie-break.
 *
 * Settings, from https://worker.graphile.org/docs/performance ("Quick stats" preset):
 * - `concurrentJobs: 24` (`concurrency`), `maxPoolSize` = concurrency + 1 (graphile's own pool);
 * - `completeJobBatchDelay: 0`, `failJobBatchDelay: 0` (batched completion);
 * - `localQueue: { size: 500 }` only with `{ localQueue: true }`: in 0.17.3 a batch fetch can
 *   lock several jobs of one named queue and run them concurrently (graphile/worker#621,
 *   fixed after 0.17.3; seen here: 7 jobs of one queue at once), so that variant does NOT
 *   guarantee per-aggregate order (tasks still start in order, so a drain without failures
 *   usually lands in order, but a retried publish is overtaken);
 * - `pollInterval` and `useNodeTime` left at their defaults (2 s, PostgreSQL time): new jobs
 *   arrive by LISTEN/NOTIFY and the backlog is fetched back to back, so neither changes a drain.
 */
import { Logger, type Runner, run, runMigrations, type Task } from 'graphile-worker';
import type { BenchContext, DrainResult, DrainSystem, DrainWorkload } from '../types.js';
import { benchEvent, inChunks } from '../workload.js';
import { AckCounter, type Broker, ident, inTransaction, openBroker, subjectOf } from './shared.js';

export interface GraphileWorkerOptions {
  /** One named queue per aggregate (per-aggregate order). Default true; false measures the cost. */
  readonly queuePerAggregate?: boolean;
  /** Enable the 0.17 local queue (size 500). Faster, but breaks named-queue order in 0.17.3. */
  readonly localQueue?: boolean;
  /** Jobs run concurrently per runner. Default 24 (the performance page's setting). */
  readonly concurrency?: number;
}

interface JobPayload {
  readonly subject: string;
  readonly event: unknown;
}

const TASK = 'publish_event';

/** Errors and warnings only: the default logger prints a line per worker start. */
const logger = new Logger(() => (level, message) => {
  if (String(level) === 'error' || String(level) === 'warning') console.error(`[graphile-worker] ${message}`);
});

export function graphileWorkerSystem(options: GraphileWorkerOptions = {}): DrainSystem {
  const concurrency = options.concurrency ?? 24;
  const perAggregate = options.queuePerAggregate ?? true;
  let runners: Runner[] = [];
  let broker: Broker | undefined;
  const schemaOf = (ctx: BenchContext) => `${ctx.schema}_graphile`;

  return {
    name: `graphile-worker${options.localQueue ? ' (localQueue)' : ''}${perAggregate ? '' : ' (no queue names)'}`,

    async load(ctx: BenchContext, workload: DrainWorkload): Promise<void> {
      const schema = schemaOf(ctx);
      await runMigrations({ connectionString: ctx.databaseUrl, schema, logger });
      await inChunks(workload.events, 1000, (from, count) =>
        inTransaction(ctx.pool, async (client) => {
          const specs = Array.from({ length: count }, (_, k) => {
            const event = benchEvent(from + k, workload.aggregates, workload.payloadBytes);
            const payload: JobPayload = { subject: subjectOf(ctx, event), event: event.payload };
            return { identifier: TASK, payload, queue_name: perAggregate ? event.aggregateId : null };
          });
          await client.query(
            `SELECT count(*) FROM ${ident(schema)}.add_jobs(
               ARRAY(SELECT s FROM json_populate_recordset(null::${ident(schema)}.job_spec, $1::json) s))`,
            [JSON.stringify(specs)],
          );
        }),
      );
    },

    async drain(ctx: BenchContext, workload: DrainWorkload): Promise<DrainResult> {
      const js = await openBroker(ctx);
      broker = js;
      const acks = new AckCounter(workload.events);
      const publish: Task = async (payload, helpers) => {
        const { subject, event } = payload as JobPayload;
        const id = `gw-${helpers.job.id}`;
        await js.publish(subject, JSON.stringify(event), id);
        acks.ack(id);
      };
      // One runner per relay: each is a worker pool of its own, as separate processes would be.
      for (let r = 0; r < workload.relays; r++) {
        const runner = await run({
          connectionString: ctx.databaseUrl,
          maxPoolSize: concurrency + 1,
          schema: schemaOf(ctx),
          concurrency,
          noHandleSignals: true,
          logger,
          taskList: { [TASK]: publish },
          preset: {
            worker: {
              completeJobBatchDelay: 0,
              failJobBatchDelay: 0,
              ...(options.localQueue ? { localQueue: { size: 500 } } : {}),
            },
          },
        });
        runner.promise.catch((error: unknown) =>
          acks.fail(error instanceof Error ? error : new Error(String(error))),
        );
        runners.push(runner);
      }
      return await acks.done();
    },

    async teardown(ctx: BenchContext): Promise<void> {
      await Promise.all(runners.map((runner) => runner.stop()));
      runners = [];
      await broker?.close();
      broker = undefined;
      await ctx.pool.query(`DROP SCHEMA IF EXISTS ${ident(schemaOf(ctx))} CASCADE`);
    },
  };
}
