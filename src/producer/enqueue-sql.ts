/**
 * The producer's statements: one round trip per call. Each hands out the
 * per-aggregate sequence (the upsert's row lock orders concurrent writers of
 * one aggregate), derives the partition from a stable hash of the aggregate
 * key, inserts the event rows, and optionally wakes listening relays.
 */

const PARTITION_OF = `((hashtextextended({{type}} || chr(31) || {{id}}, 0) & 9223372036854775807)
         % (SELECT partitions FROM {{schema}}.config))::smallint`;

/** One event, scalar parameters: the common case, kept as lean as the statement can be. */
const INSERT_ONE = `
WITH part AS (
  SELECT ${PARTITION_OF.replace('{{type}}', '$2::text').replace('{{id}}', '$3::text')} AS p
), seq AS (
  INSERT INTO {{schema}}.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence)
  VALUES ($2::text, $3::text, 1)
  ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = s.last_sequence + 1
  RETURNING last_sequence
){{wake}}
INSERT INTO {{schema}}.events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type,
  schema_version, topic, payload, payload_bytes, headers, deliver_after, next_attempt_at)
SELECT $1::uuid, part.p,
       $2, $3, seq.last_sequence, $4::text, $5::int, $6::text, $7::jsonb, $8::bytea, $9::jsonb, $10::timestamptz,
       greatest(now(), coalesce($10::timestamptz, now()))
FROM seq CROSS JOIN part{{join}}
RETURNING sequence::text AS sequence`;

/** A batch: arrays in, per-aggregate counts reserved in one upsert (in key order, against deadlocks). */
const INSERT_MANY = `
WITH input AS (
  SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::int[], $6::text[],
                       $7::jsonb[], $8::bytea[], $9::jsonb[], $10::timestamptz[])
    WITH ORDINALITY AS i(event_id, aggregate_type, aggregate_id, event_type, schema_version, topic,
                         payload, payload_bytes, headers, deliver_after, ord)
), parted AS (
  SELECT i.*, ${PARTITION_OF.replace('{{type}}', 'i.aggregate_type').replace('{{id}}', 'i.aggregate_id')} AS p
  FROM input i
), counts AS (
  SELECT aggregate_type, aggregate_id, count(*)::bigint AS n FROM input GROUP BY aggregate_type, aggregate_id
), seq AS (
  INSERT INTO {{schema}}.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence)
  SELECT aggregate_type, aggregate_id, n FROM counts ORDER BY aggregate_type, aggregate_id
  ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = s.last_sequence + excluded.last_sequence
  RETURNING aggregate_type, aggregate_id, last_sequence
){{wake}}
INSERT INTO {{schema}}.events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type,
  schema_version, topic, payload, payload_bytes, headers, deliver_after, next_attempt_at)
SELECT i.event_id, i.p,
       i.aggregate_type, i.aggregate_id,
       seq.last_sequence - c.n + row_number() OVER (PARTITION BY i.aggregate_type, i.aggregate_id ORDER BY i.ord),
       i.event_type, i.schema_version, i.topic, i.payload, i.payload_bytes, i.headers, i.deliver_after,
       greatest(now(), coalesce(i.deliver_after, now()))
FROM parted i
JOIN counts c USING (aggregate_type, aggregate_id)
JOIN seq USING (aggregate_type, aggregate_id){{join}}
ORDER BY i.ord
RETURNING event_id::text AS event_id, sequence::text AS sequence`;

export interface EnqueueStatements {
  readonly one: string;
  readonly many: string;
}

/**
 * The statements for a schema. With a wake-up channel, producers NOTIFY only
 * when the owner of an event's partition sleeps (`partitions.sleeping`): a busy
 * relay costs them nothing. PostgreSQL delivers one notification per
 * transaction for a repeated channel and payload.
 */
export function enqueueStatements(quotedSchema: string, channel: string | null): EnqueueStatements {
  const wakeOne =
    channel === null
      ? ''
      : `, wake AS (
  SELECT pg_notify('${channel}', '') FROM {{schema}}.partitions t, part WHERE t.partition = part.p AND t.sleeping
)`;
  const wakeMany =
    channel === null
      ? ''
      : `, wake AS (
  SELECT pg_notify('${channel}', '') FROM {{schema}}.partitions t
  WHERE t.sleeping AND t.partition IN (SELECT p FROM parted) LIMIT 1
)`;
  const join = channel === null ? '' : ' LEFT JOIN wake ON true';
  const fill = (sql: string, wake: string) =>
    sql.replaceAll('{{wake}}', wake).replaceAll('{{join}}', join).replaceAll('{{schema}}', quotedSchema);
  return { one: fill(INSERT_ONE, wakeOne), many: fill(INSERT_MANY, wakeMany) };
}

/** The LISTEN/NOTIFY channel of a schema (schema names are validated identifiers). */
export function wakeChannel(schema: string): string {
  return `txo_${schema}`;
}
