import type { InboxHandler } from '../../src/inbox/inbox.js';
import type { TestDb } from './db.js';

/** The business effect the consumer-adapter tests apply: one row per event, per consumer. */
export interface AppliedEffect {
  readonly event_id: string;
  readonly aggregate_id: string;
  readonly sequence: number;
}

export async function createEffectsTable(db: TestDb): Promise<void> {
  await db.pool.query(
    `CREATE TABLE "${db.schema}".effects (n bigserial, consumer text, event_id uuid, aggregate_id text, sequence int)`,
  );
}

/** A handler that records the event as this consumer's effect, in the inbox's transaction. */
export function effectsHandler(db: TestDb, consumer: string): InboxHandler {
  return async (tx, event) => {
    await tx.query(
      `INSERT INTO "${db.schema}".effects (consumer, event_id, aggregate_id, sequence) VALUES ($1, $2, $3, $4)`,
      [consumer, event.eventId, event.aggregateId, event.sequence],
    );
  };
}

/** The effects this consumer applied, in the order applied. */
export async function appliedEffects(db: TestDb, consumer: string): Promise<AppliedEffect[]> {
  const { rows } = await db.pool.query<AppliedEffect>(
    `SELECT event_id, aggregate_id, sequence FROM "${db.schema}".effects WHERE consumer = $1 ORDER BY n`,
    [consumer],
  );
  return rows;
}

/** What a recording handler saw of one applied event. */
export interface SeenEvent {
  readonly eventId: string;
  readonly type: string;
  readonly aggregateId: string;
  readonly headers: Record<string, string>;
}

/** A handler that only records what it was handed, in memory, in the order applied. */
export function recordingHandler(): { readonly handler: InboxHandler; readonly seen: SeenEvent[] } {
  const seen: SeenEvent[] = [];
  const handler: InboxHandler = async (_tx, event) => {
    seen.push({
      eventId: event.eventId,
      type: event.type,
      aggregateId: event.aggregateId,
      headers: { ...event.headers },
    });
  };
  return { handler, seen };
}
