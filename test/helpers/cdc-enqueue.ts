/**
 * `enqueue` in table or WAL mode for the CDC relay's tests. WAL mode: STAND-IN until the
 * walproducer's `enqueue(..., { via: 'wal' })` is merged — the same sequence row as enqueue, then
 * the stand-in message body (src/cdc/wal-message.ts) through pg_logical_emit_message.
 */
import { randomUUID } from 'node:crypto';
import type { PoolClient } from 'pg';
import { encodeWalEvent, eventsPrefix } from '../../src/cdc/wal-message.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';

export type Via = 'table' | 'wal';

export async function enqueueVia(
  tx: PoolClient,
  events: readonly OutboxEvent[],
  schema: string,
  via: Via,
): Promise<void> {
  if (via === 'table') {
    await enqueue(tx, events, { schema });
    return;
  }
  for (const e of events) {
    const { rows } = await tx.query<{ sequence: string; base: string; partition: number; now: Date }>(
      `WITH s AS (
         INSERT INTO "${schema}".aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence, sequence_base)
         VALUES ($1, $2, 1, 0)
         ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = s.last_sequence + 1
         RETURNING s.last_sequence, s.sequence_base)
       SELECT last_sequence::text AS sequence, sequence_base::text AS base,
              "${schema}".partition_of($1, $2) AS partition, now() AS now FROM s`,
      [e.aggregateType, String(e.aggregateId)],
    );
    const row = rows[0]!;
    const content = encodeWalEvent({
      eventId: randomUUID(),
      partition: row.partition,
      aggregateType: e.aggregateType,
      aggregateId: String(e.aggregateId),
      sequence: Number(row.sequence),
      sequenceBase: Number(row.base),
      type: e.type,
      schemaVersion: 1,
      topic: e.topic ?? null,
      headers: {},
      payload: Buffer.from(JSON.stringify(e.payload)),
      contentType: 'application/json',
      createdAt: row.now,
    });
    await tx.query('SELECT pg_logical_emit_message(true, $1, $2::bytea)', [eventsPrefix(schema), content]);
  }
}
