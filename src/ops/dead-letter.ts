/**
 * Dead events: list and show them, replay them once the cause is fixed, or skip them — resolve
 * them without publishing — with a reason. A replay puts the events back to pending; a skip
 * replaces each by its skip marker (or, without a marker, removes it and moves its aggregate
 * past it). Either unblocks the aggregates, records who did it and why in the audit table (a
 * skip with the original rows, payload and all) and wakes sleeping relays, in one transaction.
 * `dryRun` runs the same transaction and rolls it back.
 */
import type { Pool, PoolClient } from 'pg';
import { OutboxValidationError } from '../errors.js';
import { wakeChannel } from '../producer/enqueue-sql.js';
import { inTransaction } from '../producer/transaction.js';
import { redactText } from '../redact.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import { SKIPPED_EVENT_TYPE } from '../skip-marker.js';
import {
  COUNT_DEAD_SQL,
  EVENT_AUDIT_SQL,
  LIST_DEAD_SQL,
  LOCK_FOR_SKIP_SQL,
  NOT_AT_HEAD_SQL,
  REPLAY_DEAD_SQL,
  SHOW_EVENT_SQL,
  SKIP_DEAD_SQL,
  SKIP_DEAD_UNPUBLISHED_SQL,
} from './dead-letter-sql.js';

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

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

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

function checkedIds(eventIds: readonly string[]): string[] {
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

function checkedReason(reason: unknown, why: string): string {
  if (typeof reason !== 'string' || reason.trim().length === 0) {
    throw new OutboxValidationError('reason', 'is missing', `Say why the events are ${why}; it is audited.`);
  }
  // Operator text goes into rows (and, for a skip, to every consumer): no secret of a URL in it.
  return redactText(reason.trim());
}

async function actorOf(client: PoolClient, actor: string | undefined): Promise<string> {
  if (actor !== undefined && actor.trim() !== '') return actor.trim();
  return (await client.query<{ u: string }>('SELECT current_user AS u')).rows[0]!.u;
}

/** Thrown inside a dry run's transaction to roll it back with the result. */
class DryRun<T> {
  constructor(readonly result: T) {}
}

/** Runs `fn` in one transaction; committed, or rolled back when `dryRun` (same result either way). */
async function inMaybeDryTransaction<T>(
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

export interface SkipOptions {
  readonly schema?: string;
  /** The dead events to skip. A pending one is refused (nothing is skipped then). */
  readonly eventIds: readonly string[];
  /** Why: kept in the audit table and in the skip marker. Required. */
  readonly reason: string;
  /** Who: kept in the audit table and in the skip marker. Default the database user. */
  readonly actor?: string;
  /**
   * `true` (default): each event is replaced by its skip marker (type `tx-outbox.skipped`, same
   * event id, aggregate and sequence), which the relay publishes in order so consumers move past
   * it. `false`: for a destination that refuses even the marker, the event is removed and its
   * aggregate moves on without telling consumers (a `strict` consumer then sees a gap).
   */
  readonly publish?: boolean;
  /** Run the skip and roll it back: returns what would be skipped, changes nothing. */
  readonly dryRun?: boolean;
}

export interface SkipResult {
  /** The events skipped (or, in a dry run, that would be). */
  readonly skipped: readonly string[];
  /** Given ids that name no event in the table (delivered, skipped before, or never there). */
  readonly notFound: readonly string[];
  /** Whether skip markers were put in their place. */
  readonly published: boolean;
  readonly dryRun: boolean;
}

/**
 * Resolves dead events without publishing them, in one transaction: each is replaced by its skip
 * marker (or removed, with `publish: false`), its aggregate unblocked, the original rows kept
 * whole in the audit trail with the actor and reason, and sleeping relays woken. Refuses, changing
 * nothing, an id that is pending (not dead), a dead skip marker (its destination refused it:
 * skip it with `publish: false`), and with `publish: false` an event an earlier event of its
 * aggregate still waits before.
 */
export async function skipDead(pool: Pool, options: SkipOptions): Promise<SkipResult> {
  const schemaName = options.schema ?? DEFAULT_SCHEMA;
  const schema = quoteSchema(schemaName);
  const reason = checkedReason(options.reason, 'skipped');
  const ids = checkedIds(options.eventIds);
  const publish = options.publish ?? true;
  const dryRun = options.dryRun === true;
  return inMaybeDryTransaction(pool, dryRun, async (client) => {
    const actor = await actorOf(client, options.actor);
    const { rows: found } = await client.query<{
      id: string;
      event_id: string;
      status: string;
      event_type: string;
    }>(withSchema(LOCK_FOR_SKIP_SQL, schema), [ids]);
    const pending = found.filter((r) => r.status !== 'dead').map((r) => r.event_id);
    if (pending.length > 0) {
      throw new OutboxValidationError(
        'eventIds',
        `${pending.join(', ')} ${pending.length === 1 ? 'is' : 'are'} pending, not dead`,
        'Skip only dead events (see dead list); a pending event is still being delivered.',
      );
    }
    const markers = found.filter((r) => r.event_type === SKIPPED_EVENT_TYPE).map((r) => r.event_id);
    if (publish && markers.length > 0) {
      throw new OutboxValidationError(
        'eventIds',
        `${markers.join(', ')} ${markers.length === 1 ? 'is a skip marker' : 'are skip markers'} that went dead: the destination refuses ${markers.length === 1 ? 'it' : 'them'}`,
        'Skip it without a marker (--no-publish / publish: false), or fix the destination and replay it.',
      );
    }
    if (!publish) {
      const { rows: behind } = await client.query<{ event_id: string; sequence: string; before: string }>(
        withSchema(NOT_AT_HEAD_SQL, schema),
        [ids],
      );
      if (behind.length > 0) {
        const first = behind[0]!;
        throw new OutboxValidationError(
          'eventIds',
          `${first.event_id} (sequence ${first.sequence}) waits behind sequence ${first.before} of its aggregate, still undelivered`,
          'Without a marker only the first undelivered event of an aggregate can be skipped: resolve the earlier one first, or skip them together.',
        );
      }
    }
    const sql = withSchema(publish ? SKIP_DEAD_SQL : SKIP_DEAD_UNPUBLISHED_SQL, schema);
    // The locked rows by primary key: no second scan of the hot table.
    const rowIds = found.map((r) => r.id);
    const { rows } = await client.query<{ event_id: string }>(sql, [rowIds, actor, reason]);
    if (rows.length > 0) await client.query('SELECT pg_notify($1, $2)', [wakeChannel(schemaName), '']);
    const present = new Set(found.map((r) => r.event_id));
    return {
      skipped: rows.map((r) => r.event_id),
      notFound: ids.filter((id) => !present.has(id)),
      published: publish,
      dryRun,
    };
  });
}

/** One event's row, as `dead show` prints it. */
export interface EventDetails {
  readonly id: string;
  readonly eventId: string;
  readonly partition: number;
  readonly aggregateType: string;
  readonly aggregateId: string;
  readonly sequence: number;
  readonly type: string;
  readonly schemaVersion: number;
  readonly topic: string | null;
  readonly status: 'pending' | 'dead';
  readonly attempts: number;
  readonly lastError: string | null;
  readonly createdAt: Date;
  readonly deliverAfter: Date | null;
  readonly nextAttemptAt: Date;
  readonly deadAt: Date | null;
  readonly headers: Readonly<Record<string, string>>;
  /** The payload's size in bytes. */
  readonly payloadBytes: number;
  /** Its first {@link PREVIEW_CHARS} characters: JSON text, or hex for bytes. */
  readonly payloadPreview: string;
}

/** One operator action on an event. */
export interface AuditEntry {
  readonly at: Date;
  readonly actor: string;
  readonly action: string;
  readonly reason: string;
  /** How many events the action took at once. */
  readonly eventCount: number;
  /** The row as it was before a skip (kept whole in the audit trail), when the action kept it. */
  readonly original?: Readonly<Record<string, unknown>>;
}

export interface ShowResult {
  /** The event's row, while it is in the table (pending or dead). */
  readonly event: EventDetails | null;
  /** What operators did to it, oldest first. */
  readonly audit: readonly AuditEntry[];
}

/** How much of a payload `dead show` previews. */
export const PREVIEW_CHARS = 500;

/** An event's row (if still in the table) and its audit history: `dead show`. */
export async function showEvent(
  pool: Pool,
  options: { schema?: string; eventId: string },
): Promise<ShowResult> {
  const schema = quoteSchema(options.schema ?? DEFAULT_SCHEMA);
  const [eventId] = checkedIds([options.eventId]);
  const [{ rows }, { rows: audit }] = await Promise.all([
    pool.query(withSchema(SHOW_EVENT_SQL, schema), [eventId]),
    pool.query(withSchema(EVENT_AUDIT_SQL, schema), [eventId]),
  ]);
  const r = rows[0];
  return {
    event: r === undefined ? null : detailsOf(r),
    audit: audit.map((a) => ({
      at: a.at,
      actor: a.actor,
      action: a.action,
      reason: a.reason,
      eventCount: a.event_count,
      ...(a.original ? { original: a.original } : {}),
    })),
  };
}

function detailsOf(r: Record<string, unknown>): EventDetails {
  const text = r['payload'] as string | null;
  const bytes = r['payload_bytes'] as Buffer | null;
  const size = text !== null ? Buffer.byteLength(text) : (bytes?.length ?? 0);
  const preview =
    text !== null
      ? text.slice(0, PREVIEW_CHARS)
      : (bytes ?? Buffer.alloc(0)).subarray(0, PREVIEW_CHARS / 2).toString('hex');
  return {
    id: r['id'] as string,
    eventId: r['event_id'] as string,
    partition: r['partition'] as number,
    aggregateType: r['aggregate_type'] as string,
    aggregateId: r['aggregate_id'] as string,
    sequence: Number(r['sequence']),
    type: r['event_type'] as string,
    schemaVersion: r['schema_version'] as number,
    topic: r['topic'] as string | null,
    status: r['status'] as 'pending' | 'dead',
    attempts: r['attempts'] as number,
    lastError: r['last_error'] === null ? null : redactText(r['last_error'] as string),
    createdAt: r['created_at'] as Date,
    deliverAfter: r['deliver_after'] as Date | null,
    nextAttemptAt: r['next_attempt_at'] as Date,
    deadAt: r['dead_at'] as Date | null,
    headers: r['headers'] as Record<string, string>,
    payloadBytes: size,
    payloadPreview: preview,
  };
}
