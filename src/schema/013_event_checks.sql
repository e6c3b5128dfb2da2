-- tx-outbox schema, version 13: no row a relay cannot deliver (docs/schema.md, Checks on events).
-- {{schema}} is replaced by the validated, quoted schema name.
--
-- `enqueue` validates every event before it writes it, but the producer role may INSERT into
-- events by hand: a partition no lease covers (never claimed), a sequence the ordering gate
-- can never pass, a name or header a broker refuses, a time never due. One check is the door for
-- every path (enqueue, a hand-written INSERT, the CDC relay's hand-over, an operator's UPDATE);
-- it never refuses what enqueue accepts (test/integration/event-checks.test.ts).
--
-- Cost (docs/schema.md, Checks on events). PostgreSQL prepares a table's check expressions again
-- for every statement that writes it, reading every node of them (these rules inline cost about
-- 150 µs of CPU per statement, each further constraint about 3 µs). So the rules live in one
-- PL/pgSQL function behind one constraint: compiled once per session, its expressions prepared
-- once per transaction when first evaluated. The common row passes one expression; the rules one
-- by one, which say what is wrong, run for any other. Every operator, function and type in it is
-- named with its schema (pg_catalog): resolved through a session's search_path, a producer could
-- put its own in front.

-- The first reason the row could never be delivered, or NULL. `loud`: raise it instead (the
-- check), as a check_violation naming events_deliverable_check; never quotes a header value.
CREATE OR REPLACE FUNCTION {{schema}}.event_fault(
  partition smallint, aggregate_type text, aggregate_id text, sequence bigint, sequence_base bigint,
  event_type text, schema_version integer, topic text, payload jsonb, headers jsonb,
  deliver_after timestamptz, next_attempt_at timestamptz, attempts integer, loud boolean DEFAULT false)
RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
  routed pg_catalog.text;
  fault pg_catalog.text;
BEGIN
  -- The common row, at once: the partition, sequences, counts and times; names of visible ASCII
  -- (an id: printable); a destination every broker takes as it is (names.ts PLAIN_TOPIC); then
  -- no headers or the trace context alone. PL/pgSQL prepares an expression once per transaction,
  -- when first evaluated: such a row never prepares the rules one by one (below), which cost a
  -- single-event transaction about twice as much.
  IF partition OPERATOR(pg_catalog.=) {{schema}}.partition_of(aggregate_type, aggregate_id)
     AND sequence OPERATOR(pg_catalog.>=) 1 AND sequence OPERATOR(pg_catalog.<=) 9007199254740991
     AND sequence_base OPERATOR(pg_catalog.>=) 0 AND sequence_base OPERATOR(pg_catalog.<) sequence
     AND schema_version OPERATOR(pg_catalog.>=) 1 AND attempts OPERATOR(pg_catalog.>=) 0 AND pg_catalog.isfinite(next_attempt_at)
     AND (deliver_after IS NULL OR (pg_catalog.isfinite(deliver_after)
                                    AND deliver_after OPERATOR(pg_catalog.<=) '275760-09-13 00:00:00+00'::pg_catalog.timestamptz))
     AND pg_catalog.octet_length(aggregate_type) OPERATOR(pg_catalog.<=) 255 AND pg_catalog.octet_length(event_type) OPERATOR(pg_catalog.<=) 255
     AND pg_catalog.octet_length(aggregate_id) OPERATOR(pg_catalog.<=) 255
     AND pg_catalog.textregexeq(pg_catalog.concat_ws(' ', aggregate_type, event_type, aggregate_id),
                                '^[!-~]+ [!-~]+ [ -~]+$')
     AND event_type OPERATOR(pg_catalog.<>) 'tx-outbox.skipped'
     AND pg_catalog.octet_length(coalesce(topic, pg_catalog.concat_ws('.', aggregate_type, event_type))) OPERATOR(pg_catalog.<=) 255
     AND pg_catalog.textregexeq(coalesce(topic, pg_catalog.concat_ws('.', aggregate_type, event_type)),
                                E'^[!"%-),\\-/-=?-~][!"$%-),\\-/-=?-~]*(?:\\.[!"$%-),\\-/-=?-~]+)*$') THEN
    IF headers OPERATOR(pg_catalog.=) '{}'::pg_catalog.jsonb
       OR (pg_catalog.jsonb_typeof(headers) OPERATOR(pg_catalog.=) 'object'
           AND headers OPERATOR(pg_catalog.-) 'traceparent'::pg_catalog.text OPERATOR(pg_catalog.-) 'tracestate'::pg_catalog.text
               OPERATOR(pg_catalog.=) '{}'::pg_catalog.jsonb
           AND coalesce(pg_catalog.jsonb_typeof(headers OPERATOR(pg_catalog.->) 'traceparent'), 'string') OPERATOR(pg_catalog.=) 'string'
           AND coalesce(pg_catalog.jsonb_typeof(headers OPERATOR(pg_catalog.->) 'tracestate'), 'string') OPERATOR(pg_catalog.=) 'string'
           AND pg_catalog.textregexeq(pg_catalog.concat(headers OPERATOR(pg_catalog.->>) 'traceparent',
                                                        headers OPERATOR(pg_catalog.->>) 'tracestate'),
                                      '^[ -~]*$')) THEN
      RETURN NULL;
    END IF;
  ELSE
    -- Any other row: the rules one by one, the first one it breaks. A skip marker (`dead skip`,
    -- src/skip-marker.ts) goes where the event it replaces would have gone: publishers route it
    -- by the type its payload names (`skippedType`).
    routed := CASE WHEN event_type OPERATOR(pg_catalog.=) 'tx-outbox.skipped'
                   THEN payload OPERATOR(pg_catalog.->>) 'skippedType' ELSE event_type END;
    fault := CASE
      -- The partition partition_of gives (009_producer.sql): a row in another is claimed by a relay
      -- that does not hold its aggregate's other events (order lost), or, outside [0, partitions),
      -- by none.
      WHEN partition OPERATOR(pg_catalog.<>) {{schema}}.partition_of(aggregate_type, aggregate_id) THEN
        pg_catalog.format('partition %s is not its aggregate''s (%s)', partition,
                          {{schema}}.partition_of(aggregate_type, aggregate_id))
      -- Sequences start at sequence_base + 1 (docs/schema.md, Bounded tables) and stay within what
      -- relays and consumers read exactly (JavaScript's safe integers).
      WHEN sequence OPERATOR(pg_catalog.<) 1 OR sequence OPERATOR(pg_catalog.>) 9007199254740991 THEN
        pg_catalog.format('sequence %s is not from 1 to 9007199254740991', sequence)
      WHEN sequence_base OPERATOR(pg_catalog.<) 0 OR sequence_base OPERATOR(pg_catalog.>=) sequence THEN
        pg_catalog.format('sequence_base %s is not from 0 to the sequence (%s) minus 1', sequence_base, sequence)
      WHEN schema_version OPERATOR(pg_catalog.<) 1 THEN pg_catalog.format('schema_version %s is below 1', schema_version)
      WHEN attempts OPERATOR(pg_catalog.<) 0 THEN pg_catalog.format('attempts %s is below 0', attempts)
      -- Due some day; a delivery time is a JavaScript Date (at most +275760-09-13, no infinity).
      WHEN NOT pg_catalog.isfinite(next_attempt_at) THEN 'next_attempt_at is infinite: never due'
      WHEN deliver_after IS NOT NULL
           AND NOT (pg_catalog.isfinite(deliver_after)
                    AND deliver_after OPERATOR(pg_catalog.<=) '275760-09-13 00:00:00+00'::pg_catalog.timestamptz) THEN
        'deliver_after is infinite or past the last JavaScript Date (+275760-09-13)'
      -- The names (src/producer/names.ts): 1 to 255 UTF-8 bytes; no control character, Unicode
      -- noncharacter or U+FFFD (what no transport carries intact); no whitespace at either end of
      -- the aggregate type or the type (JavaScript's \s).
      WHEN aggregate_type OPERATOR(pg_catalog.=) '' OR pg_catalog.octet_length(aggregate_type) OPERATOR(pg_catalog.>) 255 THEN
        'aggregate_type is empty or over 255 bytes'
      WHEN aggregate_id OPERATOR(pg_catalog.=) '' OR pg_catalog.octet_length(aggregate_id) OPERATOR(pg_catalog.>) 255 THEN
        'aggregate_id is empty or over 255 bytes'
      WHEN event_type OPERATOR(pg_catalog.=) '' OR pg_catalog.octet_length(event_type) OPERATOR(pg_catalog.>) 255 THEN
        'event_type is empty or over 255 bytes'
      WHEN topic OPERATOR(pg_catalog.=) '' OR pg_catalog.octet_length(topic) OPERATOR(pg_catalog.>) 255 THEN 'topic is empty or over 255 bytes'
      WHEN pg_catalog.textregexeq(pg_catalog.textcat(pg_catalog.textcat(pg_catalog.textcat(aggregate_type, aggregate_id),
                                                     event_type), coalesce(topic, '')),
                                  E'[\\u0001-\\u001f\\u007f-\\u009f\\ufdd0-\\ufdef\\ufffd-\\uffff\\U0001fffe\\U0001ffff\\U0002fffe\\U0002ffff\\U0003fffe\\U0003ffff\\U0004fffe\\U0004ffff\\U0005fffe\\U0005ffff\\U0006fffe\\U0006ffff\\U0007fffe\\U0007ffff\\U0008fffe\\U0008ffff\\U0009fffe\\U0009ffff\\U000afffe\\U000affff\\U000bfffe\\U000bffff\\U000cfffe\\U000cffff\\U000dfffe\\U000dffff\\U000efffe\\U000effff\\U000ffffe\\U000fffff\\U0010fffe\\U0010ffff]') THEN
        'aggregate_type, aggregate_id, event_type or topic holds a control character, a noncharacter or U+FFFD'
      -- (The two in one regex, joined by U+001F: the regex before refuses it in a name.)
      WHEN pg_catalog.textregexeq(pg_catalog.textcat(pg_catalog.textcat(aggregate_type, E'\x1f'), event_type),
                                  E'^[\\t-\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]|[\\t-\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]\\x1f|\\x1f[\\t-\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]|[\\t-\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]$') THEN
        'aggregate_type or event_type starts or ends with whitespace'
      -- The destination, the topic or <aggregate_type>.<type>, is one every broker takes: at most
      -- 255 bytes, no whitespace, no wildcard of NATS (* >) or MQTT (+ #), no leading '$' (system
      -- subjects), no empty token (a leading, trailing or double dot).
      WHEN event_type OPERATOR(pg_catalog.=) 'tx-outbox.skipped'
           AND NOT coalesce(pg_catalog.jsonb_typeof(payload OPERATOR(pg_catalog.->) 'skippedType') OPERATOR(pg_catalog.=) 'string', false) THEN
        'a skip marker''s payload names no skippedType (a string) to route it by'
      WHEN pg_catalog.octet_length(coalesce(topic, pg_catalog.textcat(pg_catalog.textcat(aggregate_type, '.'), routed))) OPERATOR(pg_catalog.>) 255 THEN
        'the destination (topic, or <aggregate_type>.<event_type> without one) is over 255 bytes'
      WHEN pg_catalog.textregexeq(coalesce(topic, pg_catalog.textcat(pg_catalog.textcat(aggregate_type, '.'), routed)), E'^[$.]|\\.$|\\.\\.|[*>+#\\t-\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]') THEN
        'the destination (topic, or <aggregate_type>.<event_type> without one) holds whitespace, a wildcard, a leading $ or an empty token'
    END;
  END IF;
  IF fault IS NULL THEN
    fault := CASE
      -- The headers (src/producer/headers.ts): a JSON object of strings; names HTTP tokens of at
      -- most 255 characters that no transport or the envelope gives a meaning (the same list as
      -- enqueue's, any case); values printable ASCII. Read from jsonb's own text ({"name": "value",
      -- …}: quoted, `"` and `\` escaped, a control character as an escape the regex refuses, each
      -- pair followed by ", " or the closing brace). A regex costs by the character: no headers
      -- cost one comparison, the trace context alone one short regex over its values, and only a
      -- text long enough to hold a 256-character name is searched for one.
      WHEN headers OPERATOR(pg_catalog.=) '{}'::pg_catalog.jsonb THEN NULL
      WHEN pg_catalog.jsonb_typeof(headers) OPERATOR(pg_catalog.<>) 'object' THEN 'headers are not a JSON object'
      WHEN headers OPERATOR(pg_catalog.-) 'traceparent'::pg_catalog.text OPERATOR(pg_catalog.-) 'tracestate'::pg_catalog.text
           OPERATOR(pg_catalog.=) '{}'::pg_catalog.jsonb THEN
        CASE WHEN coalesce(pg_catalog.jsonb_typeof(headers OPERATOR(pg_catalog.->) 'traceparent') OPERATOR(pg_catalog.=) 'string', true)
                  AND coalesce(pg_catalog.jsonb_typeof(headers OPERATOR(pg_catalog.->) 'tracestate') OPERATOR(pg_catalog.=) 'string', true)
                  AND pg_catalog.textregexeq(
                        pg_catalog.textcat(coalesce(headers OPERATOR(pg_catalog.->>) 'traceparent', ''),
                                           coalesce(headers OPERATOR(pg_catalog.->>) 'tracestate', '')),
                        '^[ -~]*$') THEN NULL
             ELSE 'traceparent or tracestate is not a string of printable ASCII' END
      WHEN NOT pg_catalog.textregexeq(headers::pg_catalog.text, E'^\\{(?:"[-!#$%&''*+.^_`|~0-9A-Za-z]+": "(?:[ !#-\\[\\]-~]|\\\\["\\\\])*"(?:, |\\}$))+$') THEN
        'headers are not all strings of printable ASCII under HTTP token names'
      WHEN pg_catalog.octet_length(headers::pg_catalog.text) OPERATOR(pg_catalog.>) 262
           -- A name, not a value: names open the object or follow ", " (inside a value a quote is escaped).
           AND pg_catalog.textregexeq(headers::pg_catalog.text, E'(?:^\\{|, )"[-!#$%&''*+.^_`|~0-9A-Za-z]{128}[-!#$%&''*+.^_`|~0-9A-Za-z]{128}') THEN
        'a header name is over 255 characters'
      WHEN pg_catalog.texticregexeq(headers::pg_catalog.text, E'(?:^\\{|, )"(?:ce[-_]|cloudevents_|txo-|nats-)')
           OR pg_catalog.lower(headers::pg_catalog.text)::pg_catalog.jsonb OPERATOR(pg_catalog.?|) ARRAY[
              'id', 'source', 'specversion', 'type', 'datacontenttype', 'dataschema', 'subject', 'time',
              'data', 'data_base64', 'aggregatetype', 'aggregateid', 'sequence', 'aggregatesequence',
              'sequencebase', 'schemaversion', 'schemaurl', 'datacontentencoding', 'txoheaders',
              'validate', 'emit', 'clonewith', 'tojson', 'tostring', 'tolocalestring', 'valueof',
              'constructor', 'hasownproperty', 'isprototypeof', 'propertyisenumerable',
              '__definegetter__', '__definesetter__', '__lookupgetter__', '__lookupsetter__',
              'connection', 'content-length', 'expect', 'host', 'keep-alive', 'proxy-connection', 'te',
              'trailer', 'transfer-encoding', 'upgrade', 'content-type', 'webhook-id',
              'webhook-timestamp', 'webhook-signature', 'cc', 'bcc', 'payload', 'authorization',
              'proxy-authorization', '__proto__'
              ]::pg_catalog.text[] THEN
        'a header name is one the envelope or a transport gives a meaning (ce-*, id, type, cc, authorization …)'
    END;
  END IF;
  IF fault IS NOT NULL AND loud THEN
    RAISE EXCEPTION USING
      ERRCODE = 'check_violation',
      CONSTRAINT = 'events_deliverable_check',
      MESSAGE = 'tx-outbox: no relay could deliver this events row: ' OPERATOR(pg_catalog.||) fault,
      HINT = 'Write events with enqueue (docs/guarantees.md, What enqueue accepts).';
  END IF;
  RETURN fault;
END
$fn$;

-- The same for a row of the table: what an operator runs to find such rows.
CREATE OR REPLACE FUNCTION {{schema}}.event_fault(e {{schema}}.events)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
  SELECT {{schema}}.event_fault(e.partition, e.aggregate_type, e.aggregate_id, e.sequence, e.sequence_base,
                                e.event_type, e.schema_version, e.topic, e.payload, e.headers, e.deliver_after,
                                e.next_attempt_at, e.attempts)
$fn$;

-- Added NOT VALID, then validated in this migration's transaction (which holds the tables' locks
-- from the ADD on: one scan of events, one of aggregate_sequences). A row that breaks a check
-- fails the migration, naming the rows (events: the first ten by id, with their fault): such a
-- row was never deliverable; fix or delete it, then migrate again.
ALTER TABLE {{schema}}.events DROP CONSTRAINT IF EXISTS events_deliverable_check;
ALTER TABLE {{schema}}.events ADD CONSTRAINT events_deliverable_check
  CHECK ({{schema}}.event_fault(partition, aggregate_type, aggregate_id, sequence, sequence_base, event_type,
                                schema_version, topic, payload, headers, deliver_after, next_attempt_at, attempts,
                                true) IS NULL) NOT VALID;

-- The producers' sequence rows: a base of at least 0, the last sequence handed out at or above it
-- (at it: none yet) and within the safe integers (past them, the next event would break the
-- check above: enqueue fails loudly).
ALTER TABLE {{schema}}.aggregate_sequences DROP CONSTRAINT IF EXISTS aggregate_sequences_sequence_check;
ALTER TABLE {{schema}}.aggregate_sequences ADD CONSTRAINT aggregate_sequences_sequence_check
  CHECK (sequence_base >= 0 AND last_sequence >= sequence_base AND last_sequence <= 9007199254740991) NOT VALID;

DO $migration$
DECLARE
  bad bigint;
  listed text;
BEGIN
  BEGIN
    ALTER TABLE {{schema}}.events VALIDATE CONSTRAINT events_deliverable_check;
  EXCEPTION WHEN check_violation THEN
    -- The function goes with this transaction: the rows are named by id, with their fault.
    SELECT count(*), string_agg(pg_catalog.format('id %s: %s', f.id, f.fault), '; ' ORDER BY f.id)
             FILTER (WHERE f.n <= 10)
      INTO bad, listed
    FROM (SELECT e.id, {{schema}}.event_fault(e) AS fault, row_number() OVER (ORDER BY e.id) AS n
          FROM {{schema}}.events e WHERE {{schema}}.event_fault(e) IS NOT NULL) f;
    RAISE EXCEPTION 'tx-outbox migration 13: % row(s) of %.events could never be delivered, written outside enqueue: %; fix or delete them, then migrate again.',
        bad, '{{schema}}', listed
      USING ERRCODE = 'check_violation';
  END;
  BEGIN
    ALTER TABLE {{schema}}.aggregate_sequences VALIDATE CONSTRAINT aggregate_sequences_sequence_check;
  EXCEPTION WHEN check_violation THEN
    SELECT count(*) INTO bad FROM {{schema}}.aggregate_sequences
    WHERE NOT (sequence_base >= 0 AND last_sequence >= sequence_base AND last_sequence <= 9007199254740991);
    RAISE EXCEPTION 'tx-outbox migration 13: % row(s) of %.aggregate_sequences have a sequence_base below 0 or above last_sequence, or a last_sequence past 9007199254740991. Find them with SELECT * FROM %.aggregate_sequences WHERE NOT (sequence_base >= 0 AND last_sequence >= sequence_base AND last_sequence <= 9007199254740991); fix or delete them, then migrate again.',
        bad, '{{schema}}', '{{schema}}'
      USING ERRCODE = 'check_violation';
  END;
END
$migration$;
