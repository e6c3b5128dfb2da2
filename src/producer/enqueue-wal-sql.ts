/**
 * The producer's WAL-mode statements (`enqueue(tx, e, { via: 'wal' })`): the sequence rows exactly
 * as the table mode writes them — the same CTE text (enqueue-sql.ts) — and, instead of the events
 * INSERT, one transactional `pg_logical_emit_message` per event, in the order given. No events
 * row, no NOTIFY (the CDC relay streams; it does not listen). The content is the version byte and
 * fixed header written here from the statement's own values, then the body the client encoded
 * (src/producer/wal-message.ts), then HMAC-SHA256 of all that with the schema's WAL key, computed
 * here from `wal_key` (migration 12): the key never leaves the database, and only a role that may
 * read it — the producer's — writes a message the CDC relay publishes (docs/cdc.md, Who can
 * write events).
 *
 * Parameters: $1 the body (bytea, or bytea[] for a batch), $2 aggregate_type, $3 aggregate_id
 * (the numbering the shared CTEs use), $4 the caller's version(s) where given.
 */

import { KNOWN_SEQUENCE_CTES, MANY_SEQUENCE_CTES, ONE_SEQUENCE_CTES, PART_CTE } from './enqueue-sql.js';
import { eventsPrefix, walContentSql } from './wal-message.js';

/**
 * The schema's WAL key as HMAC's padded keys: one row always, so that no statement emits fewer
 * messages (or returns fewer rows) than it has events; with no key the statement fails
 * (`wal_key_missing`), and the transaction cannot commit a sequence without its event.
 */
const MAC_KEY_CTE = `mac_key AS (
  SELECT coalesce(w.ipad, {{schema}}.wal_key_missing()) AS ipad, w.opad
  FROM (VALUES (1)) AS one (x) LEFT JOIN {{schema}}.wal_key w ON true
)`;

/**
 * `pg_logical_emit_message(true, prefix, content || mac)`: transactional, so it decodes at commit
 * or never. `content` is a column of the subquery `m` (its own column, OFFSET 0: computed once,
 * where an inlined expression would be built twice), `k` the {@link MAC_KEY_CTE}. HMAC-SHA256 is
 * sha256(opad || sha256(ipad || content)), with the built-in sha256().
 */
function emit(prefix: string, m: string): string {
  return `pg_logical_emit_message(true, '${prefix}', ${m}.content || sha256(k.opad || sha256(k.ipad || ${m}.content)))`;
}

/** One event after `sequenceCtes` (which give `seq` and `part`): its sequence and its signed message. */
const emitOneAfter = (sequenceCtes: string, prefix: string) => `${sequenceCtes}, ${MAC_KEY_CTE}
SELECT m.sequence::text AS sequence, ${emit(prefix, 'm')} AS lsn
FROM (SELECT seq.last_sequence AS sequence,
             ${walContentSql('seq.last_sequence', 'seq.sequence_base', 'part.p', '$1::bytea')} AS content
      FROM seq CROSS JOIN part OFFSET 0) m
CROSS JOIN mac_key k`;

/** One event with the next gap-free sequence, any aggregate (INSERT_ONE's CTEs). */
const EMIT_ONE = (prefix: string) => emitOneAfter(ONE_SEQUENCE_CTES, prefix);

/** One event of an aggregate this process has a sequence row of (INSERT_ONE_KNOWN's CTEs): no row, no message. */
const EMIT_ONE_KNOWN = (prefix: string) => emitOneAfter(KNOWN_SEQUENCE_CTES, prefix);

/** One event with the caller's version ($4): no sequence row, sequence_base 0. */
const EMIT_ONE_VERSIONED = (prefix: string) => `${PART_CTE}, ${MAC_KEY_CTE}
SELECT ${emit(prefix, 'm')} AS lsn
FROM (SELECT ${walContentSql('$4::bigint', '0::bigint', 'part.p', '$1::bytea')} AS content FROM part OFFSET 0) m
CROSS JOIN mac_key k`;

/**
 * A batch (INSERT_MANY's CTEs). PostgreSQL evaluates a volatile function of the select list after
 * the sort (planner.c, make_sort_input_target), so the messages are emitted in `ord` order.
 */
const EMIT_MANY = (prefix: string) => `
WITH input AS (
  SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[])
    WITH ORDINALITY AS i(body, aggregate_type, aggregate_id, ord)
)${MANY_SEQUENCE_CTES}, numbered AS (
  SELECT i.ord, i.body, i.p, seq.sequence_base,
         seq.last_sequence - c.n + row_number() OVER (PARTITION BY i.aggregate_type, i.aggregate_id ORDER BY i.ord) AS sequence
  FROM parted i
  JOIN counts c USING (aggregate_type, aggregate_id)
  JOIN seq USING (aggregate_type, aggregate_id)
), ${MAC_KEY_CTE}
SELECT n.sequence::text AS sequence, ${emit(prefix, 'n')} AS lsn
FROM (SELECT n.ord, n.sequence, ${walContentSql('n.sequence', 'n.sequence_base', 'n.p', 'n.body')} AS content
      FROM numbered n OFFSET 0) n
CROSS JOIN mac_key k
ORDER BY n.ord`;

/** A batch with the callers' versions ($4): the messages only. */
const EMIT_MANY_VERSIONED = (prefix: string) => `
WITH parted AS (
  SELECT i.*, {{schema}}.partition_of(i.aggregate_type, i.aggregate_id) AS p
  FROM unnest($1::bytea[], $2::text[], $3::text[], $4::bigint[])
    WITH ORDINALITY AS i(body, aggregate_type, aggregate_id, sequence, ord)
), ${MAC_KEY_CTE}
SELECT ${emit(prefix, 'i')} AS lsn
FROM (SELECT i.ord, ${walContentSql('i.sequence', '0::bigint', 'i.p', 'i.body')} AS content
      FROM parted i OFFSET 0) i
CROSS JOIN mac_key k
ORDER BY i.ord`;

export interface WalStatements {
  readonly one: string;
  readonly oneKnown: string;
  readonly many: string;
  readonly oneVersioned: string;
  readonly manyVersioned: string;
}

/** The WAL-mode statements of a schema (validated: its name is safe inside the prefix literal). */
export function walStatements(schema: string, quotedSchema: string): WalStatements {
  const prefix = eventsPrefix(schema);
  const fill = (sql: string) => sql.replaceAll('{{schema}}', quotedSchema);
  return {
    one: fill(EMIT_ONE(prefix)),
    oneKnown: fill(EMIT_ONE_KNOWN(prefix)),
    many: fill(EMIT_MANY(prefix)),
    oneVersioned: fill(EMIT_ONE_VERSIONED(prefix)),
    manyVersioned: fill(EMIT_MANY_VERSIONED(prefix)),
  };
}
