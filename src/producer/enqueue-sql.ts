/**
 * One statement for a whole batch: hands out per-aggregate sequences (the
 * upsert's row lock orders concurrent writers of one aggregate, in key order to
 * avoid deadlocks), derives the partition from a stable hash of the aggregate
 * key, inserts the events, and optionally wakes listening relays once.
 */
const INSERT_EVENTS = `
WITH input AS (
  SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::int[], $6::text[],
                       $7::jsonb[], $8::bytea[], $9::jsonb[], $10::timestamptz[])
    WITH ORDINALITY AS i(event_id, aggregate_type, aggregate_id, event_type, schema_version, topic,
                         payload, payload_bytes, headers, deliver_after, ord)
), counts AS (
  SELECT aggregate_type, aggregate_id, count(*)::bigint AS n FROM input GROUP BY aggregate_type, aggregate_id
), seq AS (
  INSERT INTO {{schema}}.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence)
  SELECT aggregate_type, aggregate_id, n FROM counts ORDER BY aggregate_type, aggregate_id
  ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = s.last_sequence + excluded.last_sequence
  RETURNING aggregate_type, aggregate_id, last_sequence
), cfg AS (
  SELECT partitions{{notify}} FROM {{schema}}.config
)
INSERT INTO {{schema}}.events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type,
  schema_version, topic, payload, payload_bytes, headers, deliver_after, next_attempt_at)
SELECT i.event_id,
       ((hashtextextended(i.aggregate_type || chr(31) || i.aggregate_id, 0) & 9223372036854775807)
         % cfg.partitions)::smallint,
       i.aggregate_type, i.aggregate_id,
       seq.last_sequence - c.n + row_number() OVER (PARTITION BY i.aggregate_type, i.aggregate_id ORDER BY i.ord),
       i.event_type, i.schema_version, i.topic, i.payload, i.payload_bytes, i.headers, i.deliver_after,
       greatest(now(), coalesce(i.deliver_after, now()))
FROM input i
JOIN counts c USING (aggregate_type, aggregate_id)
JOIN seq USING (aggregate_type, aggregate_id)
CROSS JOIN cfg
ORDER BY i.ord
RETURNING event_id::text AS event_id, sequence::text AS sequence`;

export function insertEventsSql(quotedSchema: string, channel: string | null): string {
  const notify = channel === null ? '' : `, pg_notify('${channel}', '') AS notified`;
  return INSERT_EVENTS.replaceAll('{{schema}}', quotedSchema).replace('{{notify}}', notify);
}

/** The LISTEN/NOTIFY channel of a schema (schema names are validated identifiers). */
export function wakeChannel(schema: string): string {
  return `txo_${schema}`;
}
