-- tx-outbox schema, version 12: the key that authenticates WAL-mode events (docs/cdc.md, Who can
-- write events). {{schema}} is replaced by the validated, quoted schema name.
--
-- Any login may call pg_logical_emit_message, so a message with the events prefix proves nothing
-- by itself. `enqueue(…, { via: 'wal' })` appends HMAC-SHA256(key, content) to each message, in
-- its own statement, from this table; the CDC relay publishes only what it can verify. Reading the
-- table is the producer's right (and the relay's, and the owner's): no other role, PUBLIC included.
--
-- The key is 32 bytes of sha256 over four gen_random_uuid() (488 bits from pg_strong_random),
-- zero-padded to SHA-256's block of 64 bytes and kept only pre-padded, as HMAC uses it:
-- ipad = key XOR 0x36…, opad = key XOR 0x5c…, so that a statement computes
-- sha256(opad || sha256(ipad || content)) with the built-in sha256() (no pgcrypto).
-- created_lsn: the WAL position when the key was made. A message of format 1 (unauthenticated,
-- written by an older tx-outbox) that lies before it was written before any key existed.
CREATE TABLE IF NOT EXISTS {{schema}}.wal_key (
  singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  ipad         bytea NOT NULL CHECK (length(ipad) = 64),
  opad         bytea NOT NULL CHECK (length(opad) = 64),
  created_lsn  pg_lsn NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON {{schema}}.wal_key FROM PUBLIC;

DO $migration$
DECLARE
  k bytea;
  inner_pad bytea;
  outer_pad bytea;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM {{schema}}.wal_key) THEN
    k := pg_catalog.sha256(pg_catalog.uuid_send(pg_catalog.gen_random_uuid())
                           || pg_catalog.uuid_send(pg_catalog.gen_random_uuid())
                           || pg_catalog.uuid_send(pg_catalog.gen_random_uuid())
                           || pg_catalog.uuid_send(pg_catalog.gen_random_uuid()))
         || pg_catalog.decode(pg_catalog.repeat('00', 32), 'hex');
    inner_pad := k;
    outer_pad := k;
    FOR i IN 0..63 LOOP
      inner_pad := pg_catalog.set_byte(inner_pad, i, pg_catalog.get_byte(k, i) # 54);
      outer_pad := pg_catalog.set_byte(outer_pad, i, pg_catalog.get_byte(k, i) # 92);
    END LOOP;
    INSERT INTO {{schema}}.wal_key (ipad, opad, created_lsn)
    VALUES (inner_pad, outer_pad, pg_catalog.pg_current_wal_insert_lsn());
  END IF;
END
$migration$;

-- Raised by the WAL-mode statements when the table holds no key (its row was deleted): the
-- statement fails, so the transaction cannot commit a sequence without its event.
CREATE OR REPLACE FUNCTION {{schema}}.wal_key_missing() RETURNS bytea
LANGUAGE plpgsql VOLATILE AS $f$
BEGIN
  RAISE EXCEPTION 'tx-outbox: the outbox schema''s wal_key table holds no key, so a WAL-mode event cannot be authenticated'
    USING HINT = 'Run tx-outbox migrate again after deleting its version 12 row from the migrations table (docs/cdc.md, Who can write events).';
END
$f$;
