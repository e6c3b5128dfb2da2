/**
 * "Where is event X?": from the hot table (pending or dead, and what it waits for), the delivery
 * history (published: when, by which relay, to which publisher) or the audit trail (replayed,
 * skipped). Backs `tx-outbox event <id>`.
 */
import type { Pool } from 'pg';
import { OutboxValidationError } from '../errors.js';
import { redactText } from '../redact.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import type { AuditEntry } from './dead-show.js';
import {
  FIND_AUDIT_SQL,
  FIND_DELIVERIES_SQL,
  FIND_HOT_EVENT_SQL,
  HISTORY_ANY_SQL,
  HISTORY_REACH_SQL,
} from './find-event-sql.js';

/** What identifies an event and where it is ordered. */
export interface EventIdentity {
  readonly eventId: string;
  readonly aggregateType: string;
  readonly aggregateId: string;
  readonly sequence: number;
  readonly type: string;
  readonly topic: string | null;
  readonly partition: number;
  readonly createdAt: Date;
  /**
   * Where the aggregate's sequences restarted after a prune (docs/schema.md, Bounded tables): its
   * first event after the prune is `sequenceBase + 1`. Only for events still in the outbox; 0 when never pruned.
   */
  readonly sequenceBase?: number;
}

/** One reason a pending event is not published yet. */
export type EventWait =
  /** Its `deliverAfter` lies in the future. */
  | { readonly kind: 'deliver-after'; readonly until: Date }
  /** It failed and backs off until its next attempt. */
  | { readonly kind: 'backoff'; readonly until: Date }
  /** An earlier event of its aggregate is still in the outbox (the ordering gate holds it). */
  | {
      readonly kind: 'behind';
      /** The earliest such event (the aggregate's head). */
      readonly eventId: string;
      readonly sequence: number;
      readonly status: 'pending' | 'dead';
      readonly attempts: number;
      readonly lastError: string | null;
      /** Dead since (dead head), or its next attempt (pending head). */
      readonly since: Date | null;
      readonly nextAttemptAt: Date;
      /** Earlier events of the aggregate still in the outbox, the head included. */
      readonly earlier: number;
    }
  /** Its aggregate's head is blocked until then (`aggregate_progress.blocked_until`). */
  | { readonly kind: 'aggregate-blocked'; readonly until: Date | 'dead' }
  /**
   * Earlier sequences are neither delivered nor in the outbox: the ordering gate cannot pass it
   * (delivered so far: `deliveredSequence`).
   */
  | { readonly kind: 'gap'; readonly deliveredSequence: number }
  /** No relay holds its partition under a live lease. */
  | { readonly kind: 'no-owner'; readonly partition: number }
  /** Nothing holds it: the next claim of its partition's owner takes it. */
  | { readonly kind: 'due' };

/** One publication recorded in the delivery history. */
export interface Delivery {
  readonly publishedAt: Date;
  readonly relayId: string;
  readonly publisher: string;
  /** Attempts it took, this one included. */
  readonly attempts: number;
}

/** Where an event is; see {@link findEvent}. */
export type EventLocation =
  | {
      readonly state: 'pending';
      readonly event: EventIdentity;
      readonly attempts: number;
      readonly lastError: string | null;
      readonly nextAttemptAt: Date;
      readonly deliverAfter: Date | null;
      /** Why it is not published yet; `[{ kind: 'due' }]` when nothing holds it. */
      readonly waitingFor: readonly EventWait[];
      readonly audit: readonly AuditEntry[];
    }
  | {
      readonly state: 'dead';
      readonly event: EventIdentity;
      readonly attempts: number;
      readonly lastError: string | null;
      readonly deadAt: Date | null;
      /** Later events of its aggregate it holds back. */
      readonly blocking: number;
      readonly audit: readonly AuditEntry[];
    }
  | {
      readonly state: 'published';
      readonly event: EventIdentity;
      /** The latest publication; `deliveries` lists all (a lease takeover may publish twice). */
      readonly publishedAt: Date;
      readonly relayId: string;
      readonly publisher: string;
      readonly attempts: number;
      readonly deliveries: readonly Delivery[];
      readonly audit: readonly AuditEntry[];
    }
  | {
      /** Gone from the outbox, not in the history, named by the audit trail (latest action). */
      readonly state: 'skipped' | 'replayed';
      readonly audit: readonly AuditEntry[];
    }
  | {
      readonly state: 'unknown';
      readonly history: HistoryReach;
      readonly audit: readonly AuditEntry[];
    };

/** How far back the delivery history can answer. */
export interface HistoryReach {
  /** The schema has the deliveries table (migration 5). */
  readonly present: boolean;
  /** It holds no row: history is off (or was never on). */
  readonly empty: boolean;
  /** The oldest day (UTC, `YYYY-MM-DD`) it has a partition for. */
  readonly oldestDay: string | null;
}

export interface FindEventOptions {
  /** Outbox schema. Default `outbox`. */
  readonly schema?: string;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

interface HotRow {
  event_id: string;
  partition: number;
  aggregate_type: string;
  aggregate_id: string;
  sequence: string;
  event_type: string;
  topic: string | null;
  status: 'pending' | 'dead';
  created_at: Date;
  deliver_after: Date | null;
  next_attempt_at: Date;
  attempts: number;
  last_error: string | null;
  dead_at: Date | null;
  now: Date;
  head_event_id: string | null;
  head_sequence: string | null;
  head_status: 'pending' | 'dead' | null;
  head_attempts: number | null;
  head_last_error: string | null;
  head_next_attempt_at: Date | null;
  head_dead_at: Date | null;
  earlier: number;
  later: number;
  /** It names its previous event (015_previous_id.sql): the gate reads no progress for it. */
  chained: boolean;
  /** Gated by sequence: its aggregate's delivered sequence as the gate reads it (SEQUENCE_DELIVERED). */
  gate_delivered: string | null;
  sequence_base: string;
  blocked_until: Date | null;
  blocked_forever: boolean;
  owner: string | null;
  lease_live: boolean | null;
}

interface DeliveryRow {
  event_id: string;
  partition: number;
  aggregate_type: string;
  aggregate_id: string;
  sequence: string;
  event_type: string;
  topic: string | null;
  created_at: Date;
  published_at: Date;
  attempts: number;
  relay_id: string;
  publisher: string;
}

/**
 * Answers where the event `eventId` is: `pending` (and what it waits for), `dead`, `published`
 * (from the delivery history, kept when the relay runs with `history`), `skipped`/`replayed`
 * (from the audit trail), or `unknown`. Read-only; the operator role may run it. The hot table
 * has no index on event ids: this scans it (an operator's question, not a hot path).
 */
export async function findEvent(
  pool: Pool,
  eventId: string,
  options: FindEventOptions = {},
): Promise<EventLocation> {
  if (typeof eventId !== 'string' || !UUID.test(eventId)) {
    throw new OutboxValidationError(
      'eventId',
      `${JSON.stringify(eventId)} is not a UUID`,
      'Pass the event id (a UUID, as enqueue returned it and brokers carry it as the message id).',
    );
  }
  const schema = quoteSchema(options.schema ?? DEFAULT_SCHEMA);
  const id = eventId.toLowerCase();
  const audit = await findAudit(pool, schema, id);
  const { rows: hot } = await pool.query<HotRow>(withSchema(FIND_HOT_EVENT_SQL, schema), [id]);
  const row = hot[0];
  if (row) return fromHotTable(row, audit);
  const reach = await historyReach(pool, schema);
  if (reach.present) {
    const { rows } = await pool.query<DeliveryRow>(withSchema(FIND_DELIVERIES_SQL, schema), [id]);
    const latest = rows[0];
    if (latest) {
      return {
        state: 'published',
        event: identity(latest),
        publishedAt: latest.published_at,
        relayId: latest.relay_id,
        publisher: latest.publisher,
        attempts: latest.attempts,
        deliveries: rows.map((r) => ({
          publishedAt: r.published_at,
          relayId: r.relay_id,
          publisher: r.publisher,
          attempts: r.attempts,
        })),
        audit,
      };
    }
  }
  const last = audit.at(-1);
  // `dead skip --no-publish` ('skip-unpublished') removed it; a plain skip published a marker in its place.
  if (last?.action.startsWith('skip')) return { state: 'skipped', audit };
  if (last !== undefined) return { state: 'replayed', audit };
  return { state: 'unknown', history: reach, audit };
}

function identity(
  r: Omit<DeliveryRow, 'published_at' | 'attempts' | 'relay_id' | 'publisher'>,
): EventIdentity {
  return {
    eventId: r.event_id,
    aggregateType: r.aggregate_type,
    aggregateId: r.aggregate_id,
    sequence: Number(r.sequence),
    type: r.event_type,
    topic: r.topic,
    partition: r.partition,
    createdAt: r.created_at,
  };
}

function redacted(text: string | null): string | null {
  return text === null ? null : redactText(text);
}

function fromHotTable(r: HotRow, audit: readonly AuditEntry[]): EventLocation {
  const event = { ...identity(r), sequenceBase: Number(r.sequence_base) };
  if (r.status === 'dead') {
    return {
      state: 'dead',
      event,
      attempts: r.attempts,
      lastError: redacted(r.last_error),
      deadAt: r.dead_at,
      blocking: r.later,
      audit,
    };
  }
  return {
    state: 'pending',
    event,
    attempts: r.attempts,
    lastError: redacted(r.last_error),
    nextAttemptAt: r.next_attempt_at,
    deliverAfter: r.deliver_after,
    waitingFor: waits(r),
    audit,
  };
}

/** What holds a pending event, most telling first. */
function waits(r: HotRow): EventWait[] {
  const now = r.now.getTime();
  const found: EventWait[] = [];
  if (r.head_event_id !== null && r.head_sequence !== null && r.head_status !== null) {
    found.push({
      kind: 'behind',
      eventId: r.head_event_id,
      sequence: Number(r.head_sequence),
      status: r.head_status,
      attempts: r.head_attempts ?? 0,
      lastError: redacted(r.head_last_error),
      since: r.head_status === 'dead' ? r.head_dead_at : null,
      nextAttemptAt: r.head_next_attempt_at ?? r.now,
      earlier: r.earlier,
    });
  } else if (!r.chained) {
    // Gated by sequence: the gate starts an aggregate at greatest(delivered, base), a pruned
    // aggregate's new life at base + 1 (src/relay/claim/claim-sql.ts). A chained event with no
    // earlier one left in the table passes: its progress is not kept.
    const delivered = Number(r.gate_delivered ?? 0);
    if (Number(r.sequence) > delivered + 1) found.push({ kind: 'gap', deliveredSequence: delivered });
  }
  if (r.next_attempt_at.getTime() > now) {
    const deferred = r.attempts === 0 && r.deliver_after !== null && r.deliver_after.getTime() > now;
    found.push({ kind: deferred ? 'deliver-after' : 'backoff', until: r.next_attempt_at });
  }
  const blocked = r.blocked_until;
  if (r.head_event_id === null && !r.chained) {
    if (r.blocked_forever) found.push({ kind: 'aggregate-blocked', until: 'dead' });
    else if (blocked !== null && blocked.getTime() > now && blocked.getTime() !== r.next_attempt_at.getTime())
      found.push({ kind: 'aggregate-blocked', until: blocked });
  }
  if (r.owner === null || r.lease_live !== true) found.push({ kind: 'no-owner', partition: r.partition });
  return found.length > 0 ? found : [{ kind: 'due' }];
}

async function findAudit(pool: Pool, schema: string, id: string): Promise<AuditEntry[]> {
  const { rows } = await pool.query<{
    at: Date;
    actor: string;
    action: string;
    reason: string;
    event_count: number;
  }>(withSchema(FIND_AUDIT_SQL, schema), [id]);
  return rows.map((r) => ({
    at: r.at,
    actor: r.actor,
    action: r.action,
    reason: r.reason,
    eventCount: r.event_count,
  }));
}

async function historyReach(pool: Pool, schema: string): Promise<HistoryReach> {
  const { rows } = await pool.query<{ present: boolean; oldest_day: string | null }>(
    withSchema(HISTORY_REACH_SQL, schema),
  );
  const present = rows[0]?.present === true;
  if (!present) return { present, empty: true, oldestDay: null };
  const any = await pool.query<{ any: boolean }>(withSchema(HISTORY_ANY_SQL, schema));
  return { present, empty: any.rows[0]?.any !== true, oldestDay: rows[0]?.oldest_day ?? null };
}
