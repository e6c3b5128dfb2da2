-- tx-outbox schema, version 13: no row a relay cannot deliver (docs/schema.md, Checks on events).
-- {{schema}} is replaced by the validated, quoted schema name.
--
-- `enqueue` validates every event before it writes it, but the producer role may INSERT into
-- events by hand: a partition no lease covers (never claimed), a sequence the ordering gate
-- can never pass, a name or header a broker refuses. These checks are the door for every path
-- (enqueue, a hand-written INSERT, the CDC relay's hand-over, an operator's UPDATE). They never
-- refuse what enqueue accepts (test/integration/event-checks.test.ts). No index, no table
-- rewrite; each is a few expressions per row written (docs/performance.md, W3).
--
-- Added NOT VALID, then validated in this migration's transaction (which holds the table's lock
-- from the ADD on: the scan reads events and aggregate_sequences once each). A row that breaks a
-- check fails the migration with the count, the check and the query that finds the rows: such a
-- row was never deliverable; fix or delete it, then migrate again.

-- The partition is the one partition_of gives (009_producer.sql: IMMUTABLE, inlined): a row in
-- another partition is claimed by a relay that does not hold its aggregate's others (order
-- lost), or, outside [0, partitions), by none.
ALTER TABLE {{schema}}.events DROP CONSTRAINT IF EXISTS events_partition_check;
ALTER TABLE {{schema}}.events ADD CONSTRAINT events_partition_check
  CHECK (partition = {{schema}}.partition_of(aggregate_type, aggregate_id)) NOT VALID;

-- Sequences start at sequence_base + 1 (base 0 unless pruned: docs/schema.md, Bounded tables)
-- and stay within what relays and consumers read exactly (JavaScript's safe integers).
ALTER TABLE {{schema}}.events DROP CONSTRAINT IF EXISTS events_sequence_check;
ALTER TABLE {{schema}}.events ADD CONSTRAINT events_sequence_check
  CHECK (sequence BETWEEN 1 AND 9007199254740991 AND sequence_base >= 0 AND sequence_base < sequence) NOT VALID;

-- What enqueue takes: a positive schema version; attempts start at 0.
ALTER TABLE {{schema}}.events DROP CONSTRAINT IF EXISTS events_counts_check;
ALTER TABLE {{schema}}.events ADD CONSTRAINT events_counts_check
  CHECK (schema_version >= 1 AND attempts >= 0) NOT VALID;

-- Due some day: an infinite next attempt is never claimed; a delivery time is a JavaScript Date
-- (the relay reads it into one: at most +275760-09-13, no infinity).
ALTER TABLE {{schema}}.events DROP CONSTRAINT IF EXISTS events_due_check;
ALTER TABLE {{schema}}.events ADD CONSTRAINT events_due_check
  CHECK (isfinite(next_attempt_at)
         AND (deliver_after IS NULL
              OR (isfinite(deliver_after) AND deliver_after <= '275760-09-13 00:00:00+00'::timestamptz))) NOT VALID;

-- The names (src/producer/names.ts): 1 to 255 UTF-8 bytes; no control character, Unicode
-- noncharacter or U+FFFD (what no transport carries intact; one regex over the four); the
-- aggregate type and the type neither start nor end with whitespace (JavaScript's \s; the two
-- are tested in one regex, joined by U+001F, which the one before refuses in a name).
ALTER TABLE {{schema}}.events DROP CONSTRAINT IF EXISTS events_names_check;
ALTER TABLE {{schema}}.events ADD CONSTRAINT events_names_check
  CHECK (octet_length(aggregate_type) BETWEEN 1 AND 255
         AND octet_length(aggregate_id) BETWEEN 1 AND 255
         AND octet_length(event_type) BETWEEN 1 AND 255
         AND (topic IS NULL OR octet_length(topic) BETWEEN 1 AND 255)
         AND aggregate_type || aggregate_id || event_type || coalesce(topic, '')
             !~ E'[\\u0001-\\u001f\\u007f-\\u009f\\ufdd0-\\ufdef\\ufffd-\\uffff\\U0001fffe\\U0001ffff\\U0002fffe\\U0002ffff\\U0003fffe\\U0003ffff\\U0004fffe\\U0004ffff\\U0005fffe\\U0005ffff\\U0006fffe\\U0006ffff\\U0007fffe\\U0007ffff\\U0008fffe\\U0008ffff\\U0009fffe\\U0009ffff\\U000afffe\\U000affff\\U000bfffe\\U000bffff\\U000cfffe\\U000cffff\\U000dfffe\\U000dffff\\U000efffe\\U000effff\\U000ffffe\\U000fffff\\U0010fffe\\U0010ffff]'
         AND aggregate_type || E'\x1f' || event_type
             !~ E'^[\\t-\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]|[\\t-\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]\\u001f|\\u001f[\\t-\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]|[\\t-\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]$') NOT VALID;

-- The destination: the topic, or without one <aggregate_type>.<event_type>, is one every broker
-- takes (src/producer/names.ts): at most 255 bytes, no whitespace, no wildcard of NATS (* >) or
-- MQTT (+ #), no leading '$' (system subjects), no empty token (a leading, trailing or double dot).
-- A skip marker (`dead skip`, src/skip-marker.ts) goes where the event it replaces would have
-- gone: its payload names that type (`skippedType`), which publishers route by.
ALTER TABLE {{schema}}.events DROP CONSTRAINT IF EXISTS events_topic_check;
ALTER TABLE {{schema}}.events ADD CONSTRAINT events_topic_check
  CHECK ((event_type <> 'tx-outbox.skipped' OR coalesce(jsonb_typeof(payload -> 'skippedType') = 'string', false))
         AND octet_length(coalesce(topic, aggregate_type || '.' || CASE WHEN event_type = 'tx-outbox.skipped'
                                                                       THEN payload ->> 'skippedType' ELSE event_type END)) <= 255
         AND coalesce(topic, aggregate_type || '.' || CASE WHEN event_type = 'tx-outbox.skipped'
                                                           THEN payload ->> 'skippedType' ELSE event_type END)
             !~ E'^[$.]|\\.$|\\.\\.|[*>+#\\t-\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]') NOT VALID;

-- The headers (src/producer/headers.ts): a JSON object of strings; names are HTTP tokens of at
-- most 255 characters that no transport or the envelope gives a meaning (the CloudEvents
-- attributes and prefixes, connection and credential headers …: the same list, any case);
-- values are printable ASCII. Read from jsonb's own text ({"name": "value", …}: names and values
-- quoted, `"` and `\` escaped, a control character as an escape the first regex refuses, each
-- pair followed by ", " or the closing brace). PostgreSQL's regexes cost by the character: an
-- empty object (no trace context) is one comparison, the trace context alone (traceparent,
-- tracestate) skips the name lists, and only a text long enough to hold a 256-character name
-- is searched for one.
ALTER TABLE {{schema}}.events DROP CONSTRAINT IF EXISTS events_headers_check;
ALTER TABLE {{schema}}.events ADD CONSTRAINT events_headers_check
  CHECK (headers = '{}'::jsonb
         OR (headers::text ~ E'^\\{(?:"[-!#$%&''*+.^_`|~0-9A-Za-z]+": "(?:[ !#-\\[\\]-~]|\\\\["\\\\])*"(?:, |\\}$))+$'
             AND (headers - 'traceparent' - 'tracestate' = '{}'::jsonb
                  OR (NOT lower(headers::text)::jsonb ?| ARRAY[
                        'id', 'source', 'specversion', 'type', 'datacontenttype', 'dataschema',
                        'subject', 'time', 'data', 'data_base64', 'aggregatetype', 'aggregateid',
                        'sequence', 'aggregatesequence', 'sequencebase', 'schemaversion',
                        'schemaurl', 'datacontentencoding', 'txoheaders', 'validate', 'emit',
                        'clonewith', 'tojson', 'tostring', 'tolocalestring', 'valueof',
                        'constructor', 'hasownproperty', 'isprototypeof', 'propertyisenumerable',
                        '__definegetter__', '__definesetter__', '__lookupgetter__',
                        '__lookupsetter__', 'connection', 'content-length', 'expect', 'host',
                        'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding',
                        'upgrade', 'content-type', 'webhook-id', 'webhook-timestamp',
                        'webhook-signature', 'cc', 'bcc', 'payload', 'authorization',
                        'proxy-authorization', '__proto__']
                      AND headers::text !~* E'(?:^\\{|, )"(?:ce[-_]|cloudevents_|txo-|nats-)'))
             AND (octet_length(headers::text) <= 262
                  OR headers::text !~ E'"[-!#$%&''*+.^_`|~0-9A-Za-z]{128}[-!#$%&''*+.^_`|~0-9A-Za-z]{128}'))) NOT VALID;

-- The producers' sequence rows: a base of at least 0, the last sequence handed out at or above it
-- (at it: none yet) and within the safe integers (past them, the next event would break
-- events_sequence_check: enqueue fails loudly).
ALTER TABLE {{schema}}.aggregate_sequences DROP CONSTRAINT IF EXISTS aggregate_sequences_sequence_check;
ALTER TABLE {{schema}}.aggregate_sequences ADD CONSTRAINT aggregate_sequences_sequence_check
  CHECK (sequence_base >= 0 AND last_sequence >= sequence_base AND last_sequence <= 9007199254740991) NOT VALID;

DO $migration$
DECLARE
  c record;
  expression text;
  bad bigint;
BEGIN
  FOR c IN
    SELECT k.conrelid::regclass AS tbl, k.conname, pg_get_constraintdef(k.oid) AS def
    FROM pg_constraint k
    WHERE k.conrelid IN ('{{schema}}.events'::regclass, '{{schema}}.aggregate_sequences'::regclass)
      AND k.contype = 'c' AND NOT k.convalidated
      AND k.conname IN ('events_partition_check', 'events_sequence_check', 'events_counts_check',
                        'events_due_check', 'events_names_check', 'events_topic_check',
                        'events_headers_check', 'aggregate_sequences_sequence_check')
    ORDER BY k.conrelid, k.conname
  LOOP
    BEGIN
      EXECUTE format('ALTER TABLE %s VALIDATE CONSTRAINT %I', c.tbl, c.conname);
    EXCEPTION WHEN check_violation THEN
      expression := regexp_replace(c.def, '^CHECK \((.*)\)( NOT VALID)?$', '\1');
      EXECUTE format('SELECT count(*) FROM %s WHERE NOT (%s)', c.tbl, expression) INTO bad;
      RAISE EXCEPTION 'tx-outbox migration 13: % row(s) of % break the check %: rows no relay can deliver, written outside enqueue. Find them with SELECT * FROM % WHERE NOT (%); fix or delete them, then migrate again.',
          bad, c.tbl, c.conname, c.tbl, expression
        USING ERRCODE = 'check_violation';
    END;
  END LOOP;
END
$migration$;
