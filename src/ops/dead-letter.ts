/**
 * Dead events: list them, and replay them once the cause is fixed, with a reason. A replay puts
 * the events back to pending, unblocks their aggregates, records who did it and why in the audit
 * table and wakes sleeping relays, in one transaction; `dryRun` runs it and rolls it back. The
 * checks and the transaction are shared with `skip` (dead-skip.ts) and `show` (dead-show.ts).
 */
import type { Pool, PoolClient } from 'pg';
import { OutboxValidationError } from '../errors.js';
import { wakeChannel } from '../producer/enqueue-sql.js';
import { inTransaction } from '../producer/transaction.js';
import { redactText } from '../redact.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import { COUNT_DEAD_SQL, LIST_DEAD_SQL, REPLAY_DEAD_SQL } from './dead-letter-sql.js';

export interface DeadEvent {
  readonly eventId: string;
  readonly aggregateType: string;
  readonly aggregateId: string;
  readonly sequence: number;
  readonly type: string;
  readonly topic: string | null;
  readonly attempts: number;
  readonly lastError: string | null;
  readonly createdAt: Date;
  readonly deadAt: Date | null;
}

/** Which dead events: every given field must match (none given: every dead event). */
export interface DeadFilter {
  /** Only the aggregates of this type. */
  readonly aggregateType?: string;
  /** Only the aggregates with this id (with or without `aggregateType`). */
  readonly aggregateId?: string;
  /** Only events of this type. */
  readonly type?: string;
  /** Only events dead since this time (database clock). */
  readonly since?: Date;
}

export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** True when the filter selects something narrower than every dead event. */
export function hasDeadFilter(filter: DeadFilter): boolean {
  return (
    filter.aggregateType !== undefined ||
    filter.aggregateId !== undefined ||
    filter.type !== undefined ||
    filter.since !== undefined
  );
}

/** The filter as statement parameters `$1`–`$5` (see dead-letter-sql.ts). */
function filterValues(ids: readonly string[] | null, filter: DeadFilter): unknown[] {
  for (const name of ['aggregateType', 'aggregateId', 'type'] as const) {
    const value = filter[name];
    if (value !== undefined && (typeof value !== 'string' || value === '')) {
      throw new OutboxValidationError(
        name,
        'is empty or not a string',
        `Pass the ${name} to match, or leave it out.`,
      );
    }
  }
  if (
    filter.since !== undefined &&
    !(filter.since instanceof Date && !Number.isNaN(filter.since.getTime()))
  ) {
    throw new OutboxValidationError('since', 'is not a valid Date', 'Pass a Date, or leave it out.');
  }
  return [
    ids,
    filter.aggregateType ?? null,
    filter.aggregateId ?? null,
    filter.type ?? null,
    filter.since ?? null,
  ];
}

export function checkedIds(eventIds: readonly string[]): string[] {
  if (!Array.isArray(eventIds) || eventIds.length === 0) {
    throw new OutboxValidationError('eventIds', 'is empty', "Pass the dead events' ids.");
  }
  const bad = eventIds.find((id) => typeof id !== 'string' || !UUID.test(id));
  if (bad !== undefined) {
    throw new OutboxValidationError('eventIds', `${JSON.stringify(bad)} is not a UUID`, 'Pass event ids.');
  }
  // An id given twice (in either case) is one event.
  return [...new Set(eventIds.map((id) => id.toLowerCase()))];
}

export function checkedReason(reason: unknown, why: string): string {
  if (typeof reason !== 'string' || reason.trim().length === 0) {
    throw new OutboxValidationError('reason', 'is missing', `Say why the events are ${why}; it is audited.`);
  }
  // Operator text goes into rows (and, for a skip, to every consumer): no secret of a URL in it.
  return redactText(reason.trim());
}

export async function actorOf(client: PoolClient, actor: string | undefined): Promise<string> {
  if (actor !== undefined && actor.trim() !== '') return actor.trim();
  return (await client.query<{ u: string }>('SELECT current_user AS u')).rows[0]!.u;
}

/** Thrown inside a dry run's transaction to roll it back with the result. */
class DryRun<T> {
  constructor(readonly result: T) {}
}

/** Runs `fn` in one transaction; committed, or rolled back when `dryRun` (same result either way). */
export async function inMaybeDryTransaction<T>(
  pool: Pool,
  dryRun: boolean,
  fn: (client: PoolClient) => Promise<T>,
): Promise<T> {
  try {
    return await inTransaction(pool, async (client) => {
      const result = await fn(client);
      if (dryRun) throw new DryRun(result);
      return result;
    });
  } catch (error) {
    if (error instanceof DryRun) return error.result as T;
    throw error;
  }
}

function deadEventOf(r: Record<string, unknown>): DeadEvent {
  return {
    eventId: r['event_id'] as string,
    aggregateType: r['aggregate_type'] as string,
    aggregateId: r['aggregate_id'] as string,
    sequence: Number(r['sequence']),
    type: r['event_type'] as string,
    topic: r['topic'] as string | null,
    attempts: r['attempts'] as number,
    // The relay records errors redacted; older rows may still quote a URL with its secrets.
    lastError: r['last_error'] === null ? null : redactText(r['last_error'] as string),
    createdAt: r['created_at'] as Date,
    deadAt: r['dead_at'] as Date | null,
  };
}

/** The dead events, oldest dead first, that the filter (and `eventIds`, when given) selects. */
export async function listDead(
  pool: Pool,
  options: DeadFilter & { schema?: string; limit?: number; eventIds?: readonly string[] } = {},
): Promise<DeadEvent[]> {
  const schema = quoteSchema(options.schema ?? DEFAULT_SCHEMA);
  const ids = options.eventIds === undefined ? null : checkedIds(options.eventIds);
  const { rows } = await pool.query(withSchema(LIST_DEAD_SQL, schema), [
    ...filterValues(ids, options),
    options.limit ?? 100,
  ]);
  return rows.map(deadEventOf);
}

/** How many dead events the filter selects. */
export async function countDead(pool: Pool, options: DeadFilter & { schema?: string } = {}): Promise<number> {
  const schema = quoteSchema(options.schema ?? DEFAULT_SCHEMA);
  const { rows } = await pool.query<{ n: number }>(
    withSchema(COUNT_DEAD_SQL, schema),
    filterValues(null, options),
  );
  return rows[0]!.n;
}

export interface ReplayOptions {
  readonly schema?: string;
  /** The dead events to replay; `'all'` replays every dead event the `filter` selects. */
  readonly eventIds: readonly string[] | 'all';
  /** Narrows what is replayed (with `'all'`, or with ids). */
  readonly filter?: DeadFilter;
  /** Why: kept in the audit table. Required. */
  readonly reason: string;
  /** Who: kept in the audit table. Default the database user. */
  readonly actor?: string;
  /** Run the replay and roll it back: returns what would be replayed, changes nothing. */
  readonly dryRun?: boolean;
}

/** Puts dead events back to pending; returns the ids replayed (ids that were not dead are ignored). */
export async function replayDead(pool: Pool, options: ReplayOptions): Promise<string[]> {
  const schemaName = options.schema ?? DEFAULT_SCHEMA;
  const schema = quoteSchema(schemaName);
  const reason = checkedReason(options.reason, 'replayed');
  const ids = options.eventIds === 'all' ? null : checkedIds(options.eventIds);
  const values = filterValues(ids, options.filter ?? {});
  return inMaybeDryTransaction(pool, options.dryRun === true, async (client) => {
    const actor = await actorOf(client, options.actor);
    const { rows } = await client.query<{ event_id: string }>(withSchema(REPLAY_DEAD_SQL, schema), [
      ...values,
      actor,
      reason,
    ]);
    if (rows.length > 0) await client.query('SELECT pg_notify($1, $2)', [wakeChannel(schemaName), '']);
    return rows.map((r) => r.event_id);
  });
}
