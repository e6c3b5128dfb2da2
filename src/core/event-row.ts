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

/**
 * The message a publisher gets for an events row. The usual row (no sequence base, no
 * `deliverAfter`) becomes one object literal: one shape for every message, no temporary objects,
 * and no JSON parse for the empty headers most rows carry.
 */
export function toMessage(row: EventRow): OutboxMessage {
  const bytes = row.payload_bytes;
  const base = row.sequence_base;
  if ((base === undefined || base === '0') && row.deliver_after === null) {
    return {
      id: row.id,
      eventId: row.event_id,
      aggregateType: row.aggregate_type,
      aggregateId: row.aggregate_id,
      sequence: Number(row.sequence),
      type: row.event_type,
      schemaVersion: row.schema_version,
      topic: row.topic,
      payload: bytes ?? Buffer.from(row.payload ?? 'null'),
      contentType: bytes ? 'application/octet-stream' : 'application/json',
      headers: headersOf(row.headers),
      createdAt: row.created_at,
      attempts: row.attempts,
    };
  }
  const sequenceBase = Number(base ?? 0);
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
    headers: headersOf(row.headers),
    createdAt: row.created_at,
    ...(row.deliver_after ? { deliverAfter: row.deliver_after } : {}),
    attempts: row.attempts,
  };
}

/** The row's `headers` (JSON text of an object); a fresh object each time, as JSON.parse gives. */
function headersOf(text: string): Record<string, string> {
  return text === '{}' ? {} : (JSON.parse(text) as Record<string, string>);
}
