/**
 * The ground truth and the consumer-side truth, and the invariants between them. Producers
 * write `chaos.orders` (one row per event) in the event's own transaction: what committed is
 * what must arrive. The consumer writes `chaos.effects` in the inbox transaction: what was
 * applied, in which order (`applied_order`, taken under the inbox's per-aggregate lock).
 */
import type pg from 'pg';

export const TRUTH_SQL = `
CREATE SCHEMA IF NOT EXISTS chaos;
CREATE TABLE IF NOT EXISTS chaos.orders (
  event_id     uuid PRIMARY KEY,
  aggregate_id text NOT NULL,
  sequence     int NOT NULL,
  committed_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS chaos.effects (
  applied_order bigserial PRIMARY KEY,
  event_id      uuid NOT NULL,
  aggregate_id  text NOT NULL,
  sequence      int NOT NULL,
  consumer      text NOT NULL,
  applied_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS effects_event ON chaos.effects (event_id);
`;

export interface Invariant {
  readonly name: string;
  readonly value: number;
  readonly ok: boolean;
  /** A few offending rows, for the report. */
  readonly examples: readonly string[];
}

export interface Truth {
  readonly committedEvents: number;
  readonly effects: number;
  readonly invariants: readonly Invariant[];
}

/** [committed_at, first applied_at] in epoch ms per applied event, ordered by commit. */
export type LatencyRow = readonly [number, number];

async function count(db: pg.Pool, sql: string): Promise<number> {
  const { rows } = await db.query<{ n: string | null }>(sql);
  return Number(rows[0]?.n ?? 0);
}

async function examples(db: pg.Pool, sql: string): Promise<string[]> {
  const { rows } = await db.query(`${sql} LIMIT 5`);
  return rows.map((r) => JSON.stringify(r));
}

const LOST = `FROM chaos.orders o WHERE NOT EXISTS (SELECT 1 FROM chaos.effects e WHERE e.event_id = o.event_id)`;
const PHANTOM = `FROM chaos.effects e WHERE NOT EXISTS (SELECT 1 FROM chaos.orders o WHERE o.event_id = e.event_id)`;
const TWICE = `FROM (SELECT event_id, count(*) AS c FROM chaos.effects GROUP BY event_id HAVING count(*) > 1) d`;
const MISMATCHED = `FROM chaos.effects e JOIN chaos.orders o USING (event_id)
  WHERE e.aggregate_id <> o.aggregate_id OR e.sequence <> o.sequence`;
const OUT_OF_ORDER = `FROM (SELECT aggregate_id, sequence, applied_order,
    lag(sequence) OVER (PARTITION BY aggregate_id ORDER BY applied_order) AS previous
  FROM chaos.effects) x
  WHERE (previous IS NULL AND sequence <> 1) OR (previous IS NOT NULL AND sequence <> previous + 1)`;

/** Events committed that have no effect yet, and events still in the outbox (the drain's test). */
export async function backlog(db: pg.Pool, schema: string): Promise<{ unapplied: number; outbox: number }> {
  const unapplied = await count(db, `SELECT count(*) AS n ${LOST}`);
  const outbox = await count(db, `SELECT count(*) AS n FROM ${schema}.events`);
  return { unapplied, outbox };
}

export async function committedEvents(db: pg.Pool): Promise<number> {
  return count(db, 'SELECT count(*) AS n FROM chaos.orders');
}

export async function checkTruth(db: pg.Pool, schema: string): Promise<Truth> {
  const invariants: Invariant[] = [];
  const add = async (name: string, from: string, select = 'count(*)', show = '*'): Promise<void> => {
    const value = await count(db, `SELECT ${select} AS n ${from}`);
    invariants.push({
      name,
      value,
      ok: value === 0,
      examples: value === 0 ? [] : await examples(db, `SELECT ${show} ${from}`),
    });
  };
  await add('lost (committed, not applied)', LOST, 'count(*)', 'o.event_id, o.aggregate_id, o.sequence');
  await add(
    'phantom (applied, never committed)',
    PHANTOM,
    'count(*)',
    'e.event_id, e.aggregate_id, e.sequence',
  );
  await add('applied more than once (extra effects)', TWICE, 'coalesce(sum(c - 1), 0)');
  await add('applied with another aggregate or sequence', MISMATCHED, 'count(*)', 'e.event_id');
  await add(
    'applied out of order (per aggregate)',
    OUT_OF_ORDER,
    'count(*)',
    'aggregate_id, previous, sequence',
  );
  await add(
    'outbox pending',
    `FROM ${schema}.events WHERE status = 'pending'`,
    'count(*)',
    'id, aggregate_id, sequence, attempts, last_error',
  );
  await add(
    'outbox dead',
    `FROM ${schema}.events WHERE status = 'dead'`,
    'count(*)',
    'id, aggregate_id, sequence, attempts, last_error',
  );
  await add(
    'inbox quarantined',
    `FROM ${schema}.inbox_quarantine`,
    'count(*)',
    'event_id, aggregate_id, sequence, reason',
  );
  return {
    committedEvents: await committedEvents(db),
    effects: await count(db, 'SELECT count(*) AS n FROM chaos.effects'),
    invariants,
  };
}

export async function latencyRows(db: pg.Pool): Promise<LatencyRow[]> {
  const { rows } = await db.query<{ c: number; a: number }>(
    `SELECT (extract(epoch FROM o.committed_at) * 1000)::float8 AS c, (extract(epoch FROM min(e.applied_at)) * 1000)::float8 AS a
       FROM chaos.orders o JOIN chaos.effects e USING (event_id)
      GROUP BY o.event_id, o.committed_at ORDER BY o.committed_at`,
  );
  return rows.map((r) => [r.c, r.a] as const);
}
