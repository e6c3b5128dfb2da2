/** `tx-outbox dead show`: one event of the hot table in full, with its audit history. */
import type { Pool } from 'pg';
import { redactText } from '../redact.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import { checkedIds } from './dead-letter.js';
import { EVENT_AUDIT_SQL, SHOW_EVENT_SQL } from './dead-letter-sql.js';

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
