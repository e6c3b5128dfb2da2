-- tx-outbox schema, version 9: a cheaper producer (docs/performance.md, W3).
-- {{schema}} is replaced by the validated, quoted schema name.

-- The partition of an aggregate key. The schema's partition count never changes after it is
-- created, so it is written into the function as a constant: an IMMUTABLE SQL function the planner
-- inlines, where the statement used to read config for every event. Every function and operator is
-- pg_catalog's, named so: a session whose search_path puts another schema first cannot swap them
-- (and scatter an aggregate over partitions). A SET search_path clause would stop the inlining.
DO $migration$
DECLARE n integer;
BEGIN
  SELECT partitions INTO STRICT n FROM {{schema}}.config;
  EXECUTE format(
    $f$CREATE OR REPLACE FUNCTION {{schema}}.partition_of(aggregate_type text, aggregate_id text)
       RETURNS smallint LANGUAGE sql IMMUTABLE PARALLEL SAFE
       AS 'SELECT ((pg_catalog.hashtextextended(pg_catalog.textcat(pg_catalog.textcat($1, pg_catalog.chr(31)), $2), 0::bigint)
                   OPERATOR(pg_catalog.&) 9223372036854775807) OPERATOR(pg_catalog.%%) %s::bigint)::smallint'$f$,
    n);
END
$migration$;
