/**
 * The fence of a relay's writes, as a CTE: the partition rows `$1` (the owner) holds under the
 * epochs it claimed them with (`$2` partitions, `$3` epochs), locked FOR SHARE — a takeover
 * raises the epochs and waits for the statement, or the statement sees the new epochs and its
 * writes filter on `fence` to nothing. Shared by the outcome statement, the sequence-fault
 * statements and every write of the CDC relay (which adds its `held` check).
 */
export const PARTITION_FENCE = `fence AS (
  SELECT p.partition
  FROM {{schema}}.partitions p
  JOIN unnest($2::smallint[], $3::bigint[]) AS o(partition, epoch) ON o.partition = p.partition
  WHERE p.owner = $1 AND p.epoch = o.epoch
  FOR SHARE OF p
)`;
