/**
 * Operating the inbox: list and inspect quarantined messages, release them with a
 * reason (audited) so the consumer handles them again, and prune old dedup records.
 */
import type { Pool } from 'pg';
import { OutboxValidationError } from '../errors.js';
import { renamedOptions } from '../options/renamed.js';
import { inTransaction } from '../producer/transaction.js';
import { redactText } from '../redact.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';

export interface QuarantinedMessage {
  readonly id: string;
  readonly consumer: string;
  readonly eventId: string;
  readonly aggregateType: string;
  readonly aggregateId: string;
  readonly sequence: number;
  readonly type: string;
  readonly schemaVersion: number;
  readonly reason: string;
  readonly attempts: number;
  readonly quarantinedAt: Date;
  readonly releasedAt: Date | null;
  readonly releaseReason: string | null;
  /** The quarantined event of the same aggregate this one waits behind (strict), or null. */
  readonly behindEventId: string | null;
  readonly headers?: Readonly<Record<string, string>>;
  readonly payload?: Uint8Array;
}

const COLUMNS = `id::text AS id, consumer, event_id::text AS event_id, aggregate_type, aggregate_id,
  sequence::text AS sequence, event_type, schema_version, reason, attempts, quarantined_at, released_at, release_reason,
  behind_event_id::text AS behind_event_id`;

/** Quarantine ids are bigint identities: a whole number from 1 to this. */
export const MAX_QUARANTINE_ID = 2n ** 63n - 1n;

/** True for a string that can be a quarantine id (a bigint from 1 up). */
export function isQuarantineId(id: unknown): id is string {
  return (
    typeof id === 'string' && /^\d{1,19}$/.test(id) && BigInt(id) >= 1n && BigInt(id) <= MAX_QUARANTINE_ID
  );
}

/** The longest window `pruneInbox` takes (100 years), well inside what `now() - interval` can hold. */
export const MAX_PRUNE_WINDOW_MS = 36_500 * 86_400_000;
/** The most dedup records one prune statement deletes. */
const MAX_PRUNE_BATCH = 1_000_000;

export const LIST_QUARANTINE_SQL = `
SELECT ${COLUMNS} FROM {{schema}}.inbox_quarantine
WHERE ($1::text IS NULL OR consumer = $1)
ORDER BY quarantined_at, id
LIMIT $2`;

export const SHOW_QUARANTINED_SQL = `SELECT ${COLUMNS}, headers, payload FROM {{schema}}.inbox_quarantine WHERE id = $1`;

/**
 * Releases the given messages and, with each, the messages of its aggregate parked behind it
 * (`behind_event_id`: they waited for it, or for one behind it) with a higher sequence: the
 * replay applies them in order after it. One audit row names them all.
 */
export const RELEASE_SQL = `
WITH picked AS (
  SELECT consumer, aggregate_type, aggregate_id, sequence FROM {{schema}}.inbox_quarantine
  WHERE id = ANY ($1::bigint[]) AND released_at IS NULL
), released AS (
  UPDATE {{schema}}.inbox_quarantine q
  SET released_at = now(), release_reason = $2
  WHERE q.released_at IS NULL AND (
    q.id = ANY ($1::bigint[]) OR (q.behind_event_id IS NOT NULL AND EXISTS (
      SELECT 1 FROM picked p
      WHERE p.consumer = q.consumer AND p.aggregate_type = q.aggregate_type
        AND p.aggregate_id = q.aggregate_id AND q.sequence > p.sequence)))
  RETURNING id, event_id, aggregate_type, aggregate_id, sequence
), audited AS (
  INSERT INTO {{schema}}.audit (actor, action, event_ids, reason)
  SELECT $3, 'inbox-release', array_agg(event_id ORDER BY aggregate_type, aggregate_id, sequence), $2
  FROM released HAVING count(*) > 0
)
SELECT event_id::text AS event_id, id::text AS id FROM released ORDER BY aggregate_type, aggregate_id, sequence`;

export const PRUNE_SQL = `
WITH old AS (
  SELECT consumer, event_id FROM {{schema}}.inbox
  WHERE processed_at < now() - $1 * interval '1 millisecond'
  LIMIT $2
)
DELETE FROM {{schema}}.inbox i USING old
WHERE i.consumer = old.consumer AND i.event_id = old.event_id`;

type Row = Record<string, unknown>;

function toQuarantined(r: Row): QuarantinedMessage {
  return {
    id: r['id'] as string,
    consumer: r['consumer'] as string,
    eventId: r['event_id'] as string,
    aggregateType: r['aggregate_type'] as string,
    aggregateId: r['aggregate_id'] as string,
    sequence: Number(r['sequence']),
    type: r['event_type'] as string,
    schemaVersion: r['schema_version'] as number,
    // Recorded redacted; older rows may still quote an address with its key.
    reason: redactText(r['reason'] as string),
    attempts: r['attempts'] as number,
    quarantinedAt: r['quarantined_at'] as Date,
    releasedAt: (r['released_at'] as Date | null) ?? null,
    releaseReason: (r['release_reason'] as string | null) ?? null,
    behindEventId: (r['behind_event_id'] as string | null) ?? null,
    ...(r['headers'] ? { headers: r['headers'] as Record<string, string> } : {}),
    ...(r['payload'] ? { payload: r['payload'] as Buffer } : {}),
  };
}

export async function listQuarantine(
  pool: Pool,
  options: { schema?: string; consumer?: string; limit?: number } = {},
): Promise<QuarantinedMessage[]> {
  const sql = withSchema(LIST_QUARANTINE_SQL, quoteSchema(options.schema ?? DEFAULT_SCHEMA));
  const { rows } = await pool.query(sql, [options.consumer ?? null, options.limit ?? 100]);
  return rows.map(toQuarantined);
}

export async function showQuarantined(
  pool: Pool,
  options: { schema?: string; id: string },
): Promise<QuarantinedMessage | undefined> {
  if (!isQuarantineId(options.id))
    throw new OutboxValidationError(
      'id',
      `"${options.id}" is not a quarantine id`,
      'Pass an id from inbox list.',
    );
  const sql = withSchema(SHOW_QUARANTINED_SQL, quoteSchema(options.schema ?? DEFAULT_SCHEMA));
  const { rows } = await pool.query(sql, [options.id]);
  return rows[0] ? toQuarantined(rows[0]) : undefined;
}

/**
 * Marks quarantined messages released, with the messages of their aggregates parked behind them;
 * the consumer handles them again, in aggregate order (`inbox.replayReleased`). Returns the event
 * ids released.
 */
export async function releaseQuarantined(
  pool: Pool,
  options: { schema?: string; ids: readonly string[]; reason: string; actor?: string },
): Promise<string[]> {
  return (await releaseQuarantinedReport(pool, options)).eventIds;
}

export interface ReleaseReport {
  /** The event ids released (those given and the ones parked behind them), in aggregate order. */
  readonly eventIds: string[];
  /** The ids given that were not released: no such message, or released before. */
  readonly notReleased: string[];
}

/** `releaseQuarantined`, also saying which of the ids given it did not release (`inbox release`). */
export async function releaseQuarantinedReport(
  pool: Pool,
  options: { schema?: string; ids: readonly string[]; reason: string; actor?: string },
): Promise<ReleaseReport> {
  if (typeof options.reason !== 'string' || options.reason.trim() === '') {
    throw new OutboxValidationError(
      'reason',
      'is missing',
      'Say why the messages are released; it is audited.',
    );
  }
  if (options.ids.length === 0 || !options.ids.every(isQuarantineId)) {
    throw new OutboxValidationError('ids', 'must be quarantine ids', 'Pass ids from inbox list.');
  }
  const sql = withSchema(RELEASE_SQL, quoteSchema(options.schema ?? DEFAULT_SCHEMA));
  return inTransaction(pool, async (tx) => {
    const actor = options.actor ?? (await tx.query<{ u: string }>('SELECT current_user AS u')).rows[0]!.u;
    const { rows } = await tx.query<{ event_id: string; id: string }>(sql, [
      options.ids,
      options.reason.trim(),
      actor,
    ]);
    const released = new Set(rows.map((r) => r.id));
    return {
      eventIds: rows.map((r) => r.event_id),
      notReleased: [...new Set(options.ids.map((id) => BigInt(id).toString()))].filter(
        (id) => !released.has(id),
      ),
    };
  });
}

/** Options of {@link pruneInbox}: `dedupRetentionMs`, as `prune({ inbox })` names it (`olderThanMs` before). */
export type PruneInboxOptions = {
  readonly schema?: string;
  readonly replayHorizonMs: number;
  readonly batch?: number;
} & (
  | { readonly dedupRetentionMs: number }
  | {
      /** @deprecated Use `dedupRetentionMs`. */
      readonly olderThanMs: number;
    }
);

/**
 * Deletes dedup records older than `dedupRetentionMs`. Refuses a window shorter than the
 * replay horizon — how far back a broker may still redeliver (stream retention,
 * a consumer group reset …): pruning inside it would let a redelivery apply twice.
 */
export async function pruneInbox(pool: Pool, given: PruneInboxOptions): Promise<number> {
  const options = renamedOptions('pruneInbox', given, { olderThanMs: 'dedupRetentionMs' }) as {
    readonly schema?: string;
    readonly dedupRetentionMs: number;
    readonly replayHorizonMs: number;
    readonly batch?: number;
  };
  if (!(options.replayHorizonMs > 0)) {
    throw new OutboxValidationError(
      'replayHorizonMs',
      'is missing',
      'Say how far back your broker may redeliver.',
    );
  }
  for (const field of ['dedupRetentionMs', 'replayHorizonMs'] as const) {
    if (!(options[field] <= MAX_PRUNE_WINDOW_MS)) {
      throw new OutboxValidationError(
        field,
        `is ${String(options[field])}`,
        `Pass a number of milliseconds up to ${MAX_PRUNE_WINDOW_MS} (100 years).`,
      );
    }
  }
  if (!(options.dedupRetentionMs >= options.replayHorizonMs)) {
    throw new OutboxValidationError(
      'dedupRetentionMs',
      `(${options.dedupRetentionMs} ms) is shorter than the replay horizon (${options.replayHorizonMs} ms)`,
      'Keep dedup records at least as long as a broker may redeliver, or a redelivery applies twice.',
    );
  }
  const batch = options.batch ?? 10_000;
  // A batch of 0 deletes nothing and so never ends the loop below.
  if (!(Number.isSafeInteger(batch) && batch >= 1 && batch <= MAX_PRUNE_BATCH)) {
    throw new OutboxValidationError(
      'batch',
      `is ${String(batch)}`,
      `Pass a whole number of rows from 1 to ${MAX_PRUNE_BATCH} per statement (default 10000).`,
    );
  }
  const sql = withSchema(PRUNE_SQL, quoteSchema(options.schema ?? DEFAULT_SCHEMA));
  let total = 0;
  for (;;) {
    const { rowCount } = await pool.query(sql, [options.dedupRetentionMs, batch]);
    total += rowCount ?? 0;
    if ((rowCount ?? 0) < batch) return total;
  }
}
