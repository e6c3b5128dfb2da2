/** Partition leases. Every change of owner raises the epoch (the fencing token). */

/** Also reads the database clock (epoch ms), for the relay↔database clock offset. */
export const HEARTBEAT_SQL = `
INSERT INTO {{schema}}.relays AS r (relay_id, host, pid, lease_ms) VALUES ($1, $2, $3, $4)
ON CONFLICT (relay_id) DO UPDATE SET heartbeat_at = now(), lease_ms = excluded.lease_ms
RETURNING extract(epoch FROM clock_timestamp()) * 1000 AS db_ms`;

/**
 * The same with the relay's kind (migration 11): 'poll', or 'cdc' for a CDC relay, which never
 * counts in the polling relays' fair share.
 */
export const HEARTBEAT_KIND_SQL = `
INSERT INTO {{schema}}.relays AS r (relay_id, host, pid, lease_ms, kind) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (relay_id) DO UPDATE SET heartbeat_at = now(), lease_ms = excluded.lease_ms
RETURNING extract(epoch FROM clock_timestamp()) * 1000 AS db_ms`;

/** A relay silent for longer than its own lease is gone; its partitions expire on their own. */
export const LIVE_RELAYS_SQL = `
WITH gone AS (
  DELETE FROM {{schema}}.relays WHERE heartbeat_at + lease_ms * interval '1 millisecond' < now()
)
SELECT relay_id FROM {{schema}}.relays
WHERE heartbeat_at + lease_ms * interval '1 millisecond' >= now()
ORDER BY relay_id`;

/**
 * The live polling relays (migration 11): the ones the fair share divides the partitions among. A CDC
 * relay (kind 'cdc') standing by must not make the polling relays give partitions up that it can
 * never take (it takes all or none).
 */
export const LIVE_POLL_RELAYS_SQL = `
WITH gone AS (
  DELETE FROM {{schema}}.relays WHERE heartbeat_at + lease_ms * interval '1 millisecond' < now()
)
SELECT relay_id FROM {{schema}}.relays
WHERE heartbeat_at + lease_ms * interval '1 millisecond' >= now() AND kind = 'poll'
ORDER BY relay_id`;

/**
 * The partition rows this relay holds under the given epochs, locked in partition
 * order — the order the outcome statement's fence takes them — so statements of one
 * relay never deadlock each other.
 */
const HELD = `held AS (
  SELECT p.partition
  FROM {{schema}}.partitions p
  JOIN unnest($2::smallint[], $3::bigint[]) AS o(partition, epoch) ON o.partition = p.partition
  WHERE p.owner = $1 AND p.epoch = o.epoch
  ORDER BY p.partition
  FOR UPDATE OF p
)`;

/**
 * `synchronous_commit = off` for this statement's transaction alone (set_config(…, true) is SET
 * LOCAL), joined in so that it runs. The partition rows a write locks are the ones every outcome
 * statement's fence takes FOR SHARE: committed without waiting for the WAL flush, the lock is
 * held for the statement's time, not for an fsync, and the relay's own outcomes are not held up.
 * A write lost with a server crash is safe: a renewal lost only shortens the lease (claims check
 * it in the database), a flag lost only delays a wake-up to the poll interval.
 */
const NO_FLUSH_WAIT = `no_flush_wait AS (SELECT set_config('synchronous_commit', 'off', true))`;

export const RENEW_SQL = `
WITH ${NO_FLUSH_WAIT}, ${HELD}
UPDATE {{schema}}.partitions p
SET lease_until = now() + $4 * interval '1 millisecond'
FROM held, no_flush_wait
WHERE p.partition = held.partition
RETURNING p.partition, p.epoch::text AS epoch`;

export const RELEASE_SQL = `
WITH ${HELD}
UPDATE {{schema}}.partitions p
SET owner = NULL, lease_until = '-infinity', sleeping = false
FROM held
WHERE p.partition = held.partition`;

export const ACQUIRE_SQL = `
UPDATE {{schema}}.partitions p
SET owner = $1, epoch = p.epoch + 1, lease_until = now() + $3 * interval '1 millisecond', sleeping = false
WHERE p.partition IN (
  SELECT partition FROM {{schema}}.partitions
  WHERE owner IS NULL OR lease_until < now()
  ORDER BY partition
  LIMIT $2
  FOR UPDATE SKIP LOCKED)
RETURNING p.partition, p.epoch::text AS epoch`;

export const UNREGISTER_SQL = `DELETE FROM {{schema}}.relays WHERE relay_id = $1`;

/** An idle relay asks the producers of its partitions to NOTIFY it (or, awake again, to stop). */
export const SET_SLEEPING_SQL = `
WITH ${NO_FLUSH_WAIT}, ${HELD}
UPDATE {{schema}}.partitions p
SET sleeping = $4
FROM held, no_flush_wait
WHERE p.partition = held.partition AND p.sleeping <> $4`;

/**
 * Exclusive mode (the CDC relay): every partition in one statement, or none. All rows are locked
 * in partition order first, so two standbys racing queue on partition 0 and never split them; the
 * second then sees the first's fresh leases (READ COMMITTED re-reads a locked row) and gets none.
 * Taken only when no other live owner holds any; expired leases of a dead owner count as free.
 */
export const ACQUIRE_ALL_SQL = `
WITH locked AS (
  SELECT partition, owner, lease_until
  FROM {{schema}}.partitions
  ORDER BY partition
  FOR UPDATE
), free AS (
  SELECT NOT EXISTS (
    SELECT 1 FROM locked WHERE owner IS NOT NULL AND owner <> $1 AND lease_until >= now()
  ) AS ok
)
UPDATE {{schema}}.partitions p
SET owner = $1, epoch = p.epoch + 1, lease_until = now() + $2 * interval '1 millisecond', sleeping = false
FROM locked, free
WHERE free.ok AND p.partition = locked.partition
RETURNING p.partition, p.epoch::text AS epoch`;

/** Who holds live leases other than this relay, and how many: why an exclusive acquire got none. */
export const OTHER_HOLDERS_SQL = `
SELECT owner, count(*)::int AS partitions
FROM {{schema}}.partitions
WHERE owner IS NOT NULL AND owner <> $1 AND lease_until >= now()
GROUP BY owner
ORDER BY owner`;

/** The same, with whether each holder is a polling relay (relays.kind, migration 11). */
export const OTHER_HOLDERS_KIND_SQL = `
SELECT p.owner, count(*)::int AS partitions, coalesce(bool_or(r.kind = 'poll'), false) AS polling
FROM {{schema}}.partitions p
LEFT JOIN {{schema}}.relays r ON r.relay_id = p.owner
WHERE p.owner IS NOT NULL AND p.owner <> $1 AND p.lease_until >= now()
GROUP BY p.owner
ORDER BY p.owner`;
