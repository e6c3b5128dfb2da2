/**
 * The lean outcome statement (RECORD_CHAINED_DELIVERED_SQL): a batch of chained events all
 * delivered is recorded by a fenced DELETE alone. It deletes what it is given under the epochs
 * held, deletes nothing once a partition changed owner (and says so), and is not used for a batch
 * with a failure or a row gated by sequence (those need the full statement's progress writes).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enqueue } from '../../src/index.js';
import type { SourceBatch } from '../../src/relay/batch.js';
import { outcomeStatement, RECORD_CHAINED_DELIVERED_SQL } from '../../src/relay/outcome-sql.js';
import { Recorder } from '../../src/relay/record.js';
import { RelaySession, relaySessionSettings, relayStatement } from '../../src/relay/session.js';
import { RelayCounters } from '../../src/relay/stats.js';
import type { Failure, Verdict } from '../../src/relay/verdicts.js';
import { createTestDb, inTransaction, type TestDb } from '../helpers/db.js';
import { logRecorder } from '../helpers/log-recorder.js';

let db: TestDb;
let s: string;
const RELAY = 'chained-outcome';
const partitions = Array.from({ length: 16 }, (_, i) => i);

beforeAll(async () => {
  db = await createTestDb('outcome_chained', { partitions: 16 });
  s = `"${db.schema}"`;
  await db.pool.query(
    `UPDATE ${s}.partitions SET owner = $1, epoch = 1, lease_until = now() + interval '1 hour'`,
    [RELAY],
  );
});

/** The connections the recorders keep, given back before the pool ends. */
const sessions: RelaySession[] = [];

afterAll(async () => {
  for (const session of sessions) await session.release();
  await db?.close();
});

/** Writes `count` events of one aggregate with `enqueue` (chained: previous_id set); their row ids. */
async function write(aggregateId: string, count: number): Promise<string[]> {
  await inTransaction(db.pool, (client) =>
    enqueue(
      client,
      Array.from({ length: count }, (_, i) => ({
        aggregateType: 'order',
        aggregateId,
        type: 'order.changed',
        payload: { i },
      })),
      { schema: db.schema },
    ),
  );
  const { rows } = await db.pool.query<{ id: string; previous_id: string | null }>(
    `SELECT id::text AS id, previous_id::text AS previous_id FROM ${s}.events WHERE aggregate_id = $1 ORDER BY id`,
    [aggregateId],
  );
  for (const r of rows) expect(r.previous_id).not.toBeNull();
  return rows.map((r) => r.id);
}

/** A Recorder on the test schema whose connection reports each statement's name. */
function recorder(): { recorder: Recorder; names: string[]; lines: ReturnType<typeof logRecorder>['lines'] } {
  const { logger, lines } = logRecorder();
  const session = new RelaySession(db.pool, relaySessionSettings('off'), logger, 'outcome');
  const names: string[] = [];
  const spying = {
    get: async () => {
      const client = await session.get();
      return {
        query: (config: { name?: string }) => {
          names.push(config.name ?? '');
          return client.query(config as never);
        },
      };
    },
  } as unknown as RelaySession;
  const rec = new Recorder(
    spying,
    relayStatement(...outcomeStatement(undefined), db.schema, s),
    RELAY,
    logger,
    new RelayCounters(),
    [],
    relayStatement('outcome_chained', RECORD_CHAINED_DELIVERED_SQL, db.schema, s),
  );
  sessions.push(session);
  return { recorder: rec, names, lines };
}

function batch(epoch: string, chained: boolean | undefined): SourceBatch {
  return {
    messages: [],
    scanned: 0,
    partitions,
    epochs: partitions.map(() => epoch),
    ...(chained === undefined ? {} : { chained }),
  };
}

/** The verdict of a batch claimed under `epoch`: `delivered` published, `failures` not. */
function verdict(
  epoch: string,
  chained: boolean | undefined,
  delivered: string[],
  failures: Failure[] = [],
): Verdict {
  return { claimed: batch(epoch, chained), delivered, failures, unavailable: 0, refused: new Set() };
}

async function remaining(ids: readonly string[]): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${s}.events WHERE id = ANY ($1::bigint[])`,
    [ids],
  );
  return rows[0]!.n;
}

describe('the outcome of a batch of chained events all delivered', () => {
  it('is the lean statement: a fenced DELETE, no progress row', async () => {
    const { recorder: rec, names, lines } = recorder();
    const ids = await write('lean-1', 5);
    await rec.record(verdict('1', true, ids));
    expect(names).toEqual([`txo_outcome_chained_${db.schema}`]);
    expect(await remaining(ids)).toBe(0);
    const progress = await db.pool.query(
      `SELECT 1 FROM ${s}.aggregate_progress WHERE aggregate_id = 'lean-1'`,
    );
    expect(progress.rowCount).toBe(0);
    expect(lines.filter((l) => l.level === 'warn')).toEqual([]);
  });

  it('deletes nothing under an epoch no longer held, and says the outcome was fenced', async () => {
    const { recorder: rec, lines } = recorder();
    const ids = await write('lean-2', 3);
    await db.pool.query(`UPDATE ${s}.partitions SET epoch = 2`);
    try {
      await rec.record(verdict('1', true, ids));
      expect(await remaining(ids)).toBe(3);
      expect(lines.some((l) => l.level === 'warn' && l.msg.startsWith('outcome fenced'))).toBe(true);
    } finally {
      await db.pool.query(`UPDATE ${s}.partitions SET epoch = 1`);
      await db.pool.query(`DELETE FROM ${s}.events WHERE id = ANY ($1::bigint[])`, [ids]);
    }
  });

  it('is the full statement for a batch with a failure, or not known to be chained', async () => {
    const { recorder: rec, names } = recorder();
    const ids = await write('lean-3', 4);
    const failure: Failure = {
      id: ids[3]!,
      status: 'pending',
      delayMs: 60_000,
      error: 'x',
      reason: 'retryable',
    };
    await rec.record({
      claimed: batch('1', true),
      delivered: ids.slice(0, 3),
      failures: [failure],
      unavailable: 0,
      refused: new Set(),
    });
    const ids2 = await write('lean-4', 2);
    await rec.record(verdict('1', undefined, ids2));
    expect(names).toEqual([`txo_outcome_${db.schema}`, `txo_outcome_${db.schema}`]);
    expect(await remaining([...ids.slice(0, 3), ...ids2])).toBe(0);
    // The failure blocks its aggregate until its retry: the full statement's progress write.
    const { rows } = await db.pool.query<{ blocked: boolean }>(
      `SELECT blocked_until > now() AS blocked FROM ${s}.aggregate_progress WHERE aggregate_id = 'lean-3'`,
    );
    expect(rows).toEqual([{ blocked: true }]);
  });
});
