import type { OutboxMessage } from './message.js';

/**
 * A row of `<schema>.events` as the relay reads it, whoever read it: the claim statement's row,
 * or an insert decoded from the replication stream. Text where PostgreSQL sends bigints.
 */
export interface EventRow {
  readonly id: string;
  readonly event_id: string;
  readonly aggregate_type: string;
  readonly aggregate_id: string;
  readonly sequence: string;
  /** Absent only in rows of tests written before migration 006. */
  readonly sequence_base?: string;
  readonly event_type: string;
  readonly schema_version: number;
  readonly topic: string | null;
  readonly payload: string | null;
  readonly payload_bytes: Buffer | null;
  readonly headers: string;
  readonly created_at: Date;
  readonly deliver_after: Date | null;
  readonly attempts: number;
}

/** The message a publisher gets for an events row. */
export function toMessage(row: EventRow): OutboxMessage {
  const bytes = row.payload_bytes;
  const sequenceBase = Number(row.sequence_base ?? 0);
  return {
    id: row.id,
    eventId: row.event_id,
    aggregateType: row.aggregate_type,
    aggregateId: row.aggregate_id,
    sequence: Number(row.sequence),
    ...(sequenceBase > 0 ? { sequenceBase } : {}),
    type: row.event_type,
    schemaVersion: row.schema_version,
    topic: row.topic,
    payload: bytes ?? Buffer.from(row.payload ?? 'null'),
    contentType: bytes ? 'application/octet-stream' : 'application/json',
    headers: JSON.parse(row.headers) as Record<string, string>,
    createdAt: row.created_at,
    ...(row.deliver_after ? { deliverAfter: row.deliver_after } : {}),
    attempts: row.attempts,
  };
}
