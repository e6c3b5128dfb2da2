/**
 * Physical ceiling (a): the SQL-only claim + delete cycle, no broker. The same
 * claim statement and outcome statement the relay runs, on one connection, in
 * batches, with the relay's session settings; every claimed event is recorded
 * as delivered at once.
 */
import { CLAIM_SQL } from '../../src/relay/claim-sql.js';
import { RECORD_OUTCOME_SQL } from '../../src/relay/outcome-sql.js';
import { loadOutbox } from './tx-outbox.js';
import type { DrainSystem } from './types.js';

export function sqlCeilingSystem(batchSize = 1000): DrainSystem {
  return {
    name: 'ceiling (a): SQL claim+delete only',
    load: loadOutbox,
    async drain(ctx, workload) {
      const schema = `"${ctx.schema}"`;
      const client = await ctx.pool.connect();
      try {
        await client.query(
          `UPDATE ${schema}.partitions SET owner = 'ceiling', epoch = 1, lease_until = now() + interval '1 hour'`,
        );
        await client.query(
          'SET synchronous_commit = off; SET enable_seqscan = off; SET enable_bitmapscan = off',
        );
        const { rows: parts } = await client.query(
          `SELECT partition FROM ${schema}.partitions ORDER BY partition`,
        );
        const partitions = parts.map((p) => p.partition as number);
        const epochs = partitions.map(() => '1');
        const claim = {
          name: `ceiling_claim_${ctx.schema}`,
          text: CLAIM_SQL.replaceAll('{{schema}}', schema),
        };
        const outcome = {
          name: `ceiling_outcome_${ctx.schema}`,
          text: RECORD_OUTCOME_SQL.replaceAll('{{schema}}', schema),
        };
        let delivered = 0;
        const started = performance.now();
        for (;;) {
          const { rows } = await client.query({
            ...claim,
            values: [partitions, epochs, 'ceiling', batchSize, []],
          });
          if (rows.length === 0) break;
          await client.query({
            ...outcome,
            values: ['ceiling', partitions, epochs, rows.map((r) => r.id), [], [], [], []],
          });
          delivered += rows.length;
        }
        const seconds = (performance.now() - started) / 1000;
        await client.query('RESET ALL');
        return { seconds, delivered: Math.min(delivered, workload.events) };
      } finally {
        client.release();
      }
    },
    async teardown() {},
  };
}
