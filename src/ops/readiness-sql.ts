/**
 * The readiness check's one statement, O(partitions): how many partitions there are and how many
 * have no live lease (no owner, or a lease that ran out). It also proves the database answers.
 */
export const READINESS_PARTITIONS_SQL = `
SELECT
  count(*)::int4 AS partitions,
  count(*) FILTER (WHERE owner IS NULL OR lease_until < now())::int4 AS unowned
FROM {{schema}}.partitions`;

/** The database check without a relay: the server answers. */
export const READINESS_PING_SQL = 'SELECT 1';
