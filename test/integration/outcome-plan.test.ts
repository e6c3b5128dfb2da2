/**
 * The outcome statement's plan (src/relay/outcome-sql.ts): the DELETE of a batch probes the
 * primary key once per id, whatever the number of partitions held. Joined with the fence, it was
 * planned as a nested loop that probed every id once per partition (16 × the index work and the
 * relay's largest PostgreSQL cost per event). Read from EXPLAIN ANALYZE under the relay's own
 * session settings, in a transaction rolled back.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { maintainHistory } from '../../src/relay/history.js';
import { outcomeStatement } from '../../src/relay/outcome-sql.js';
import { relaySessionSettings } from '../../src/relay/session.js';
import { createTestDb, type TestDb } from '../helpers/db.js';

let db: TestDb;
let partitions: number[];
let ids: string[];

interface PlanNode {
  readonly 'Node Type': string;
  readonly 'Relation Name'?: string;
  readonly Operation?: string;
  readonly 'Actual Loops': number;
  readonly 'Actual Rows': number;
  readonly Plans?: readonly PlanNode[];
}

function* nodes(node: PlanNode): Generator<PlanNode> {
  yield node;
  for (const child of node.Plans ?? []) yield* nodes(child);
}

beforeAll(async () => {
  db = await createTestDb('outcome_plan', { partitions: 16 });
  const s = `"${db.schema}"`;
  await db.pool.query(
    `INSERT INTO ${s}.events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload)
     SELECT gen_random_uuid(), ${s}.partition_of('order', 'a' || i), 'order', 'a' || i, 1, 'order.created', '{}'::jsonb
     FROM generate_series(1, 50000) AS i`,
  );
  await db.pool.query(`ANALYZE ${s}.events`);
  await db.pool.query(
    `UPDATE ${s}.partitions SET owner = 'plan', epoch = 1, lease_until = now() + interval '1 hour'`,
  );
  partitions = Array.from({ length: 16 }, (_, i) => i);
  ids = (await db.pool.query(`SELECT id::text AS id FROM ${s}.events ORDER BY id LIMIT 1000`)).rows.map(
    (r: { id: string }) => r.id,
  );
});

afterAll(async () => {
  await db?.close();
});

describe('the outcome statement', () => {
  for (const history of [undefined, { payloads: false }, { payloads: true }]) {
    it(`deletes a batch of 1,000 (of 50,000) with one primary-key probe per id over 16 partitions (history: ${JSON.stringify(history)})`, async () => {
      const [, text] = outcomeStatement(history);
      const client = await db.pool.connect();
      try {
        // The history table and today's partition, as the relay's maintainer makes them.
        if (history) await maintainHistory(db.pool, { schema: db.schema });
        await client.query(relaySessionSettings('off'));
        await client.query('BEGIN');
        const { rows } = await client.query({
          text: `EXPLAIN (ANALYZE, FORMAT JSON) ${text.replaceAll('{{schema}}', `"${db.schema}"`)}`,
          values: [
            'plan',
            partitions,
            partitions.map(() => '1'),
            ids,
            [],
            [],
            [],
            [],
            ...(history ? ['p'] : []),
          ],
        });
        const plan = (rows[0] as { 'QUERY PLAN': Array<{ Plan: PlanNode }> })['QUERY PLAN'][0]!.Plan;
        const deletes = [...nodes(plan)].filter(
          (n) => n['Operation'] === 'Delete' && n['Relation Name'] === 'events',
        );
        expect(deletes).toHaveLength(1);
        const scans = [...nodes(deletes[0]!)].filter(
          (n) => n['Node Type'] === 'Index Scan' && n['Relation Name'] === 'events',
        );
        expect(scans).toHaveLength(1);
        // One scan of the 1,000 ids, not one per partition held.
        expect(scans[0]!['Actual Loops']).toBe(1);
        expect(scans[0]!['Actual Rows']).toBe(1000);
      } finally {
        await client.query('ROLLBACK').catch(() => undefined);
        await client.query('RESET ALL').catch(() => undefined);
        client.release();
      }
    });
  }
});
