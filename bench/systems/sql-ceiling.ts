/**
 * Physical ceiling (a): the SQL-only claim + delete cycle, no broker. The same
 * claim statement and outcome statement the relay runs, with the relay's
 * session settings; every claimed event is recorded as delivered at once.
 * `pipelined`: as the relay does, the next batch is claimed on a second
 * connection while the last one's outcome is recorded (a stricter ceiling).
 */
import type pg from 'pg';
import { gateClaim } from '../../src/relay/claim/claim-gate.js';
import type { ClaimRow } from '../../src/relay/claim/claim-row.js';
import { CLAIM_SQL } from '../../src/relay/claim/claim-sql.js';
import { maintainHistory } from '../../src/relay/history.js';
import { RECORD_OUTCOME_HISTORY_SQL, RECORD_OUTCOME_SQL } from '../../src/relay/outcome-sql.js';
import { loadOutbox } from './tx-outbox.js';
import type { BenchContext, DrainSystem } from './types.js';

const SETTINGS = 'SET synchronous_commit = off; SET enable_seqscan = off; SET enable_bitmapscan = off';

interface Cycle {
  claim(exclude: readonly string[]): Promise<string[]>;
  record(ids: readonly string[]): Promise<void>;
}

async function cycle(
  ctx: BenchContext,
  claimer: pg.PoolClient,
  recorder: pg.PoolClient,
  batchSize: number,
  history: boolean,
): Promise<Cycle> {
  const schema = `"${ctx.schema}"`;
  await claimer.query(
    `UPDATE ${schema}.partitions SET owner = 'ceiling', epoch = 1, lease_until = now() + interval '1 hour'`,
  );
  const { rows: parts } = await claimer.query(
    `SELECT partition FROM ${schema}.partitions ORDER BY partition`,
  );
  const partitions = parts.map((p) => p.partition as number);
  const epochs = partitions.map(() => '1');
  const claim = { name: `ceiling_claim_${ctx.schema}`, text: CLAIM_SQL.replaceAll('{{schema}}', schema) };
  const outcome = {
    name: `ceiling_outcome${history ? '_history' : ''}_${ctx.schema}`,
    text: (history ? RECORD_OUTCOME_HISTORY_SQL : RECORD_OUTCOME_SQL).replaceAll('{{schema}}', schema),
  };
  if (history) await maintainHistory(ctx.pool, { schema: ctx.schema });
  const extra = history ? ['ceiling'] : [];
  return {
    async claim(exclude) {
      const { rows } = await claimer.query<ClaimRow>({
        ...claim,
        values: [partitions, epochs, 'ceiling', batchSize, exclude, [], '0', []],
      });
      const gates = gateClaim(rows);
      return rows.filter((_, i) => gates[i] === 'pass').map((r) => r.id);
    },
    async record(ids) {
      await recorder.query({
        ...outcome,
        values: ['ceiling', partitions, epochs, ids, [], [], [], [], ...extra],
      });
    },
  };
}

export function sqlCeilingSystem(
  options: { batchSize?: number; pipelined?: boolean; history?: boolean } = {},
): DrainSystem {
  const batchSize = options.batchSize ?? 1000;
  return {
    name: `${options.pipelined ? "ceiling (a'): SQL claim+delete, pipelined" : 'ceiling (a): SQL claim+delete'}${options.history ? ' (history)' : ''}`,
    load: loadOutbox,
    async drain(ctx, workload) {
      const claimer = await ctx.pool.connect();
      const recorder = await ctx.pool.connect();
      try {
        await claimer.query(SETTINGS);
        await recorder.query(SETTINGS);
        const c = await cycle(ctx, claimer, recorder, batchSize, options.history ?? false);
        let delivered = 0;
        const started = performance.now();
        if (options.pipelined) {
          let recording: Promise<void> = Promise.resolve();
          let inFlight: string[] = [];
          for (;;) {
            const ids = await c.claim(inFlight);
            if (ids.length === 0) {
              await recording;
              if ((await c.claim([])).length === 0) break;
              inFlight = [];
              continue;
            }
            await recording;
            inFlight = ids;
            recording = c.record(ids);
            delivered += ids.length;
          }
        } else {
          for (;;) {
            const ids = await c.claim([]);
            if (ids.length === 0) break;
            await c.record(ids);
            delivered += ids.length;
          }
        }
        const seconds = (performance.now() - started) / 1000;
        return { seconds, delivered: Math.min(delivered, workload.events) };
      } finally {
        await claimer.query('RESET ALL').catch(() => undefined);
        await recorder.query('RESET ALL').catch(() => undefined);
        claimer.release();
        recorder.release();
      }
    },
    async teardown() {},
  };
}
