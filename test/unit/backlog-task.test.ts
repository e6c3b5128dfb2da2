import type { Pool } from 'pg';
import { describe, expect, it } from 'vitest';
import { BacklogTask } from '../../src/relay/backlog-task.js';
import { logRecorder } from '../helpers/log-recorder.js';

/** A pool that refuses every query, as while the database is down: the task logs, never throws. */
function downPool(): { pool: Pool; up: () => void; queries: () => number } {
  let down = true;
  let queries = 0;
  const refuse = () => {
    queries += 1;
    if (down) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
  };
  // A statement on the pool, or a connection checked out for a transaction (readBacklog's).
  const pool = {
    query: async () => {
      refuse();
      return { rows: [] };
    },
    connect: async () => {
      refuse();
      return { query: async () => ({ rows: [] }), release: () => undefined };
    },
  } as unknown as Pool;
  return { pool, up: () => (down = false), queries: () => queries };
}

describe('BacklogTask', () => {
  it('survives a database that is down: one warning per outage, retried every tick', async () => {
    const { pool, queries } = downPool();
    const { lines, logger } = logRecorder();
    const task = new BacklogTask({
      pool,
      schema: 'outbox',
      quotedSchema: '"outbox"',
      intervalMs: 60_000,
      logger,
      relayId: 'r1',
    });
    await task.tick();
    await task.tick();
    await task.tick();
    expect(queries()).toBe(3);
    expect(lines.filter((l) => l.level === 'warn')).toHaveLength(1);
    expect(lines[0]!.msg).toMatch(/could not publish the backlog/);
    await task.stop();
  });
});
