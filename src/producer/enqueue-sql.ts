/**
 * The producer's statements: one round trip per call. Each hands out the per-aggregate sequence
 * (or takes the caller's), derives the partition from a stable hash of the aggregate key
 * (`partition_of`, 009_producer.sql), inserts the event rows, and optionally wakes listening
 * relays.
 *
 * Sequences: update first. An aggregate that has a row gets `last_sequence + 1` from an UPDATE,
 * whose row lock orders concurrent writers of one aggregate. Only an aggregate without a row (new,
 * or pruned: docs/schema.md, Bounded tables) is inserted, starting at the sequence floor:
 * `sequence_base` = the floor, its first event `base + 1`. The floor is read once per statement
 * after the UPDATE has waited on (and not found) a row the pruner held, and from a SEQUENCE, whose
 * value no snapshot hides: the pruner raises it before its delete commits, so a re-created
 * aggregate never reuses a sequence. `ON CONFLICT DO UPDATE` covers two producers creating one
 * aggregate at once. For an aggregate the process has written before, the UPDATE and the event's
 * insert alone (INSERT_ONE_KNOWN: the sequence row's insert, whose setup a statement pays for even
 * when it inserts nothing, is left out), falling back to INSERT_ONE when the row is gone. A batch:
 * one statement of CTEs, whose cost is shared by its events.
 *
 * Caller versions (`sequence` given, e.g. the business row's version under the caller's own row
 * lock): the event row only — no sequence row is read or written, `sequence_base` 0.
 */

/**
 * The sequence CTEs of one event, for any aggregate: `part` (its partition) and `seq` (its
 * `last_sequence`, `sequence_base`). Shared with the WAL statements (enqueue-wal-sql.ts), so both
 * modes hand out sequences by the same text.
 */
export const ONE_SEQUENCE_CTES = `
WITH part AS (
  SELECT {{schema}}.partition_of($2::text, $3::text) AS p
), bumped AS (
  UPDATE {{schema}}.aggregate_sequences s SET last_sequence = s.last_sequence + 1, written_at = now()
  WHERE s.aggregate_type = $2::text AND s.aggregate_id = $3::text
  RETURNING s.last_sequence, s.sequence_base
), created AS (
  INSERT INTO {{schema}}.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence, sequence_base)
  SELECT $2::text, $3::text, f.floor + 1, f.floor
  FROM (SELECT (SELECT last_value FROM {{schema}}.sequence_floor) AS floor WHERE NOT EXISTS (SELECT 1 FROM bumped) OFFSET 0) f
  ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = s.last_sequence + 1, written_at = now()
  RETURNING s.last_sequence, s.sequence_base
), seq AS (
  SELECT last_sequence, sequence_base FROM bumped UNION ALL SELECT last_sequence, sequence_base FROM created
)`;

/**
 * The events' id sequence (the identity of `events.id`). Table-mode statements draw an event's id
 * from it in the UPDATE that hands out its sequence, under the sequence row's lock, so that the
 * row can record it as the aggregate's last event and the next event can carry it as its
 * `previous_id` (015_previous_id.sql). The literal is resolved once, when the statement is planned.
 */
const NEXT_ID = `nextval('{{schema}}.events_id_seq'::regclass)`;

/**
 * What an aggregate's next event names as its previous one: the row's `last_id` while it is the
 * event at `last_sequence` (the chain is whole), else NULL (not known: a WAL-mode event or a
 * producer from before version 15 moved the sequence without it; the event is gated by sequence).
 */
const CHAIN_END = 'CASE WHEN s.last_id_sequence = s.last_sequence THEN s.last_id END';

/** The UPDATE that hands out an existing aggregate's next sequence and its event's row id. */
const CHAIN_BUMP = `
  UPDATE {{schema}}.aggregate_sequences s
  SET last_sequence = s.last_sequence + 1, written_at = now(),
      prior_id = ${CHAIN_END}, last_id = ${NEXT_ID}, last_id_sequence = s.last_sequence + 1
  WHERE s.aggregate_type = $2::text AND s.aggregate_id = $3::text
  RETURNING s.last_sequence, s.sequence_base, s.last_id, s.prior_id
`;

/**
 * Table mode's sequence CTEs of one event, for any aggregate: `part` and `seq` as in
 * {@link ONE_SEQUENCE_CTES}, `seq` also with the event's row id (`last_id`) and its previous
 * event's (`prior_id`: 0 for an aggregate's first event, NULL when not known).
 */
const ONE_CHAIN_CTES = `
WITH part AS (
  SELECT {{schema}}.partition_of($2::text, $3::text) AS p
), bumped AS (${CHAIN_BUMP}), created AS (
  INSERT INTO {{schema}}.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence, sequence_base,
                                                   last_id, last_id_sequence, prior_id)
  SELECT $2::text, $3::text, f.floor + 1, f.floor, ${NEXT_ID}, f.floor + 1, 0
  FROM (SELECT (SELECT last_value FROM {{schema}}.sequence_floor) AS floor WHERE NOT EXISTS (SELECT 1 FROM bumped) OFFSET 0) f
  ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE
  SET last_sequence = s.last_sequence + 1, written_at = now(),
      -- Drawn again, now that the row is locked: the id drawn for the insert came before the wait.
      prior_id = ${CHAIN_END}, last_id = ${NEXT_ID}, last_id_sequence = s.last_sequence + 1
  RETURNING s.last_sequence, s.sequence_base, s.last_id, s.prior_id
), seq AS (
  SELECT last_sequence, sequence_base, last_id, prior_id FROM bumped
  UNION ALL SELECT last_sequence, sequence_base, last_id, prior_id FROM created
)`;

/** The event row of the one-event table-mode statements, after `seq` and `part`. */
const INSERT_CHAINED_ONE = `
INSERT INTO {{schema}}.events (id, previous_id, event_id, partition, aggregate_type, aggregate_id, sequence, sequence_base,
  event_type, schema_version, topic, payload, payload_bytes, headers, deliver_after, next_attempt_at)
OVERRIDING SYSTEM VALUE
SELECT seq.last_id, seq.prior_id, $1::uuid, part.p, $2, $3, seq.last_sequence, seq.sequence_base, $4::text, $5::int, $6::text,
       $7::jsonb, $8::bytea, $9::jsonb, $10::timestamptz, greatest(now(), coalesce($10::timestamptz, now()))
FROM seq CROSS JOIN part{{wakeOne}}
RETURNING sequence::text AS sequence`;

/** One event with the next gap-free sequence of its aggregate, for any aggregate. */
const INSERT_ONE = `${ONE_CHAIN_CTES}${INSERT_CHAINED_ONE}`;

/** The CTEs of INSERT_ONE_KNOWN: `seq` from the UPDATE alone (no row: no row), and `part`. */
export const KNOWN_SEQUENCE_CTES = `
WITH seq AS (
  UPDATE {{schema}}.aggregate_sequences s SET last_sequence = s.last_sequence + 1, written_at = now()
  WHERE s.aggregate_type = $2::text AND s.aggregate_id = $3::text
  RETURNING s.last_sequence, s.sequence_base
), part AS (
  SELECT {{schema}}.partition_of($2::text, $3::text) AS p
)`;

/** {@link ONE_CHAIN_CTES} of an aggregate this process has seen a sequence row of: the UPDATE alone. */
const KNOWN_CHAIN_CTES = `
WITH seq AS (${CHAIN_BUMP}), part AS (
  SELECT {{schema}}.partition_of($2::text, $3::text) AS p
)`;

/**
 * One event of an aggregate this process has seen a sequence row of: the UPDATE and the insert in
 * one statement, without the sequence row's insert (whose setup the statement would pay for on
 * every event). No row (the aggregate was pruned since): no event either — `enqueue` then runs
 * INSERT_ONE, whose UPDATE finds nothing after the same wait and inserts the row above the floor.
 */
const INSERT_ONE_KNOWN = `${KNOWN_CHAIN_CTES}${INSERT_CHAINED_ONE}`;

/** The partition of one event's aggregate ($2, $3), for the caller-version statements. */
export const PART_CTE = `
WITH part AS (
  SELECT {{schema}}.partition_of($2::text, $3::text) AS p
)`;

/** One event with the caller's sequence ($11); nothing returned (the caller knows it; RETURNING cost 3 %). */
const INSERT_ONE_VERSIONED = `${PART_CTE}
INSERT INTO {{schema}}.events (event_id, partition, aggregate_type, aggregate_id, sequence, sequence_base,
  event_type, schema_version, topic, payload, payload_bytes, headers, deliver_after, next_attempt_at)
SELECT $1::uuid, part.p, $2, $3, $11::bigint, 0, $4::text, $5::int, $6::text, $7::jsonb, $8::bytea, $9::jsonb,
       $10::timestamptz, greatest(now(), coalesce($10::timestamptz, now()))
FROM part{{wakeOne}}`;

/** A batch with the callers' sequences ($11): arrays in, the event rows only. */
const INSERT_MANY_VERSIONED = `
WITH parted AS (
  SELECT i.*, {{schema}}.partition_of(i.aggregate_type, i.aggregate_id) AS p
  FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::int[], $6::text[],
              $7::jsonb[], $8::bytea[], $9::jsonb[], $10::timestamptz[], $11::bigint[])
    WITH ORDINALITY AS i(event_id, aggregate_type, aggregate_id, event_type, schema_version, topic,
                         payload, payload_bytes, headers, deliver_after, sequence, ord)
){{wake}}
INSERT INTO {{schema}}.events (event_id, partition, aggregate_type, aggregate_id, sequence, sequence_base,
  event_type, schema_version, topic, payload, payload_bytes, headers, deliver_after, next_attempt_at)
SELECT i.event_id, i.p, i.aggregate_type, i.aggregate_id, i.sequence, 0,
       i.event_type, i.schema_version, i.topic, i.payload, i.payload_bytes, i.headers, i.deliver_after,
       greatest(now(), coalesce(i.deliver_after, now()))
FROM parted i{{join}}
ORDER BY i.ord
RETURNING event_id::text AS event_id, sequence::text AS sequence`;

/**
 * The first CTEs of every batch statement, after its `input` CTE: `parted` (the input with its
 * partition p), `counts` (events per aggregate) and `locked` (the existing sequence rows, locked
 * in key order against deadlocks between batches).
 */
const BATCH_LOCK_CTES = `, parted AS (
  SELECT i.*, {{schema}}.partition_of(i.aggregate_type, i.aggregate_id) AS p
  FROM input i
), counts AS (
  SELECT aggregate_type, aggregate_id, count(*)::bigint AS n FROM input GROUP BY aggregate_type, aggregate_id
), locked AS (
  -- Existing rows locked in key order, against deadlocks between batches.
  SELECT s.aggregate_type, s.aggregate_id
  FROM {{schema}}.aggregate_sequences s JOIN counts c USING (aggregate_type, aggregate_id)
  ORDER BY s.aggregate_type, s.aggregate_id
  FOR UPDATE OF s
)`;

/**
 * The end of a batch's `created` CTE: the aggregates of `counts` that `bumped` found no row for,
 * inserted in key order (the lock order of BATCH_LOCK_CTES), and on a conflict (a writer that
 * created the row meanwhile) the batch's count added to what it wrote.
 */
const CREATE_UNBUMPED = `    FROM counts c
    WHERE NOT EXISTS (SELECT 1 FROM bumped b WHERE b.aggregate_type = c.aggregate_type AND b.aggregate_id = c.aggregate_id)
    OFFSET 0
  ) f
  ORDER BY f.aggregate_type, f.aggregate_id
  ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE
  SET last_sequence = s.last_sequence + excluded.last_sequence - excluded.sequence_base, written_at = now()`;

/**
 * The sequence CTEs of a batch, after its `input` CTE (aggregate_type, aggregate_id, ord …):
 * `parted` (the input with its partition p), `counts`, `locked`, `bumped`, `created` and `seq`
 * (per aggregate: last_sequence after the batch, sequence_base). Shared with the WAL batch.
 */
export const MANY_SEQUENCE_CTES = `${BATCH_LOCK_CTES}, bumped AS (
  UPDATE {{schema}}.aggregate_sequences s SET last_sequence = s.last_sequence + c.n, written_at = now()
  FROM locked l JOIN counts c USING (aggregate_type, aggregate_id)
  WHERE s.aggregate_type = l.aggregate_type AND s.aggregate_id = l.aggregate_id
  RETURNING s.aggregate_type, s.aggregate_id, s.last_sequence, s.sequence_base
), created AS (
  INSERT INTO {{schema}}.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence, sequence_base)
  SELECT f.aggregate_type, f.aggregate_id, f.floor + f.n, f.floor
  FROM (
    SELECT c.aggregate_type, c.aggregate_id, c.n, (SELECT last_value FROM {{schema}}.sequence_floor) AS floor
${CREATE_UNBUMPED}
  RETURNING s.aggregate_type, s.aggregate_id, s.last_sequence, s.sequence_base
), seq AS (
  SELECT aggregate_type, aggregate_id, last_sequence, sequence_base FROM bumped
  UNION ALL SELECT aggregate_type, aggregate_id, last_sequence, sequence_base FROM created
)`;

/**
 * `n` ids drawn from the events' id sequence, ascending, as an array: a batch's ids of one
 * aggregate, drawn in the SET of the statement that holds its sequence row's lock (an UPDATE's
 * SET is computed again after a wait for the row, an ON CONFLICT's after its lock), so that id
 * order stays sequence order within an aggregate.
 */
const batchIds = (n: string) => `ARRAY(SELECT ${NEXT_ID} FROM generate_series(1, ${n}))`;

/**
 * Table mode's sequence CTEs of a batch, after its `input` CTE: `parted`, `counts` and `locked` as
 * in {@link MANY_SEQUENCE_CTES}; `bumped`, `created` and `seq` per aggregate with its events' row
 * ids (`batch_ids`, drawn under the row's lock; the last one is the chain's new end, `last_id`)
 * and `prior_id` (the previous event of its first event in the batch: 0 for a new aggregate,
 * NULL when not known).
 */
const MANY_CHAIN_CTES = `${BATCH_LOCK_CTES}, bumped AS (
  UPDATE {{schema}}.aggregate_sequences s
  SET last_sequence = s.last_sequence + c.n, written_at = now(),
      prior_id = ${CHAIN_END}, (batch_ids, last_id) = (SELECT x.a, x.a[c.n] FROM (SELECT ${batchIds('c.n')} AS a) x),
      last_id_sequence = s.last_sequence + c.n
  FROM locked l JOIN counts c USING (aggregate_type, aggregate_id)
  WHERE s.aggregate_type = l.aggregate_type AND s.aggregate_id = l.aggregate_id
  RETURNING s.aggregate_type, s.aggregate_id, s.last_sequence, s.sequence_base, s.prior_id, s.batch_ids
), created AS (
  INSERT INTO {{schema}}.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence, sequence_base,
                                                   batch_ids, last_id, last_id_sequence, prior_id)
  SELECT f.aggregate_type, f.aggregate_id, f.floor + f.n, f.floor, f.a, f.a[f.n], f.floor + f.n, 0
  FROM (
    SELECT c.aggregate_type, c.aggregate_id, c.n, ${batchIds('c.n')} AS a,
           (SELECT last_value FROM {{schema}}.sequence_floor) AS floor
${CREATE_UNBUMPED},
      -- Drawn again, now that the row is locked: the ids drawn for the insert came before the wait.
      prior_id = ${CHAIN_END},
      (batch_ids, last_id) = (SELECT x.a, x.a[cardinality(x.a)]
                              FROM (SELECT ${batchIds('excluded.last_sequence - excluded.sequence_base')} AS a) x),
      last_id_sequence = s.last_sequence + excluded.last_sequence - excluded.sequence_base
  RETURNING s.aggregate_type, s.aggregate_id, s.last_sequence, s.sequence_base, s.prior_id, s.batch_ids
), seq AS (
  SELECT aggregate_type, aggregate_id, last_sequence, sequence_base, prior_id, batch_ids FROM bumped
  UNION ALL SELECT aggregate_type, aggregate_id, last_sequence, sequence_base, prior_id, batch_ids FROM created
)`;

/**
 * A batch: arrays in, per-aggregate counts reserved in one update and one insert (in key order,
 * against deadlocks); each event names the one before it of its aggregate (its first, the
 * sequence row's `prior_id`).
 */
const INSERT_MANY = `
WITH input AS (
  SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::int[], $6::text[],
                       $7::jsonb[], $8::bytea[], $9::jsonb[], $10::timestamptz[])
    WITH ORDINALITY AS i(event_id, aggregate_type, aggregate_id, event_type, schema_version, topic,
                         payload, payload_bytes, headers, deliver_after, ord)
)${MANY_CHAIN_CTES}{{wake}}
INSERT INTO {{schema}}.events (id, previous_id, event_id, partition, aggregate_type, aggregate_id, sequence, sequence_base,
  event_type, schema_version, topic, payload, payload_bytes, headers, deliver_after, next_attempt_at)
OVERRIDING SYSTEM VALUE
SELECT seq.batch_ids[row_number() OVER w],
       CASE WHEN row_number() OVER w = 1 THEN seq.prior_id ELSE seq.batch_ids[row_number() OVER w - 1] END,
       i.event_id, i.p,
       i.aggregate_type, i.aggregate_id,
       seq.last_sequence - c.n + row_number() OVER w,
       seq.sequence_base,
       i.event_type, i.schema_version, i.topic, i.payload, i.payload_bytes, i.headers, i.deliver_after,
       greatest(now(), coalesce(i.deliver_after, now()))
FROM parted i
JOIN counts c USING (aggregate_type, aggregate_id)
JOIN seq USING (aggregate_type, aggregate_id){{join}}
WINDOW w AS (PARTITION BY i.aggregate_type, i.aggregate_id ORDER BY i.ord)
ORDER BY i.ord
RETURNING event_id::text AS event_id, sequence::text AS sequence`;

export interface EnqueueStatements {
  readonly one: string;
  readonly oneKnown: string;
  readonly many: string;
  readonly oneVersioned: string;
  readonly manyVersioned: string;
}

/**
 * The statements for a schema. With a wake-up channel, producers NOTIFY only
 * when the owner of an event's partition sleeps (`partitions.sleeping`): a busy
 * relay costs them nothing. PostgreSQL delivers one notification per
 * transaction for a repeated channel and payload.
 */
export function enqueueStatements(quotedSchema: string, channel: string | null): EnqueueStatements {
  // One event: the check is a filter on its one row, a subquery of `part` (no CTE of its own, no
  // join: `part` stays inlined). It passes whatever it finds; pg_notify runs only for a sleeping
  // owner. Evaluated once, for the event's row; if the statement writes no row (a pruned
  // aggregate's known-path statement), at most a NOTIFY its retry would send anyway.
  const wakeOneFilter =
    channel === null
      ? ''
      : `
WHERE (SELECT count(pg_notify('${channel}', '')) FROM {{schema}}.partitions t
       WHERE t.partition = part.p AND t.sleeping) >= 0`;
  const wakeMany =
    channel === null
      ? ''
      : `, wake AS (
  SELECT pg_notify('${channel}', '') FROM {{schema}}.partitions t
  WHERE t.sleeping AND t.partition IN (SELECT p FROM parted) LIMIT 1
)`;
  const join = channel === null ? '' : ' LEFT JOIN wake ON true';
  const fill = (sql: string) =>
    sql
      .replaceAll('{{wake}}', wakeMany)
      .replaceAll('{{join}}', join)
      .replaceAll('{{wakeOne}}', wakeOneFilter)
      .replaceAll('{{schema}}', quotedSchema);
  return {
    one: fill(INSERT_ONE),
    oneKnown: fill(INSERT_ONE_KNOWN),
    many: fill(INSERT_MANY),
    oneVersioned: fill(INSERT_ONE_VERSIONED),
    manyVersioned: fill(INSERT_MANY_VERSIONED),
  };
}

/** The LISTEN/NOTIFY channel of a schema (schema names are validated identifiers). */
export function wakeChannel(schema: string): string {
  return `txo_${schema}`;
}
