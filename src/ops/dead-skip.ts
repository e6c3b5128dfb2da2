/**
 * `tx-outbox dead skip`: resolve dead events without publishing them. Each is replaced in place
 * by its skip marker (type `tx-outbox.skipped`, same event id, aggregate and sequence), which the
 * relay publishes in order so consumers move past it — or, for a destination that refuses even
 * the marker, removed while its aggregate moves past it. The original rows go to the audit trail
 * with the operator and reason; relays are woken; one transaction (`dryRun` rolls it back).
 */
import type { Pool } from 'pg';
import { OutboxValidationError } from '../errors.js';
import { wakeChannel } from '../producer/enqueue-sql.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import { SKIPPED_EVENT_TYPE } from '../skip-marker.js';
import { actorOf, checkedIds, checkedReason, inMaybeDryTransaction } from './dead-letter.js';
import {
  LOCK_FOR_SKIP_SQL,
  NOT_AT_HEAD_SQL,
  SKIP_DEAD_SQL,
  SKIP_DEAD_UNPUBLISHED_SQL,
} from './dead-letter-sql.js';

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
 * skip it with `publish: false`), with a marker an event whose sequence its aggregate already
 * delivered (a `sequence_repeat`: the marker would be a repeat too; skip it with `publish:
 * false`), and with `publish: false` an event an earlier event of its aggregate still waits before.
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
      sequence: string;
      delivered: string;
      repeat: boolean;
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
    // A marker keeps the event's sequence: for a repeat (dead as `sequence_repeat`) the relay
    // would mark it dead again at once, and count it again. Only removing it resolves it.
    const repeats = found.filter((r) => r.repeat);
    if (publish && repeats.length > 0) {
      const first = repeats[0]!;
      throw new OutboxValidationError(
        'eventIds',
        `${repeats.map((r) => r.event_id).join(', ')} ${repeats.length === 1 ? 'repeats a sequence' : 'repeat sequences'} its aggregate already delivered (sequence ${first.sequence}, delivered ${first.delivered}): a skip marker keeps the sequence and would go dead again`,
        'Skip it without a marker (--no-publish / publish: false): nothing of it was published.',
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
