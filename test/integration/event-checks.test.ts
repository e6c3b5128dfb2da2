import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { skipDead } from '../../src/ops/dead-skip.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import {
  headersJsonOf,
  RESERVED_HEADER_NAMES,
  RESERVED_HEADER_PREFIXES,
} from '../../src/producer/headers.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import { migrate } from '../../src/schema/migrate.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { createLoginRoles, type LoginRoles } from '../helpers/login-roles.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

/**
 * The events table's own checks (013_event_checks.sql): the producer role may INSERT into events
 * by hand, past `enqueue`'s validation. Nothing it writes may be undeliverable: a partition no
 * lease covers, a sequence the ordering gate never passes, a name, topic or header a broker
 * refuses, a time never due. Run as the real producer role `tx-outbox roles` creates; `enqueue`
 * keeps writing everything it accepts, and a relay (as the relay role) delivers it.
 */
let r: LoginRoles;
let s: string;

beforeAll(async () => {
  r = await createLoginRoles('evchk');
  s = `"${r.schema}"`;
});

afterAll(async () => {
  await r?.drop();
});

/** The producer's hand-written row: every column its grant covers. */
interface Row {
  partition?: number | 'wrong';
  aggregateType?: string;
  aggregateId?: string;
  sequence?: string | number;
  sequenceBase?: string | number;
  type?: string;
  schemaVersion?: number;
  topic?: string | null;
  headers?: string;
  deliverAfter?: string | null;
  nextAttemptAt?: string;
}

let n = 0;

async function insertByHand(row: Row): Promise<void> {
  n += 1;
  const aggregateType = row.aggregateType ?? 'order';
  const aggregateId = row.aggregateId ?? `hand-${n}`;
  // The right partition unless the row says otherwise; 'wrong': in range, but not the aggregate's.
  const partition =
    row.partition === 'wrong'
      ? `(${s}.partition_of($2, $3) + 1) % 16`
      : row.partition === undefined
        ? `${s}.partition_of($2, $3)`
        : String(row.partition);
  await r.as('producer').query(
    `INSERT INTO ${s}.events (event_id, partition, aggregate_type, aggregate_id, sequence, sequence_base,
       event_type, schema_version, topic, payload, headers, deliver_after, next_attempt_at)
     VALUES (gen_random_uuid(), ${partition}, $2, $3, $4, $5, $6, $7, $8, '{"by":"hand"}', $9::jsonb, $10,
             coalesce($1::timestamptz, now()))`,
    [
      row.nextAttemptAt ?? null,
      aggregateType,
      aggregateId,
      row.sequence ?? 1,
      row.sequenceBase ?? 0,
      row.type ?? 'order.placed',
      row.schemaVersion ?? 1,
      row.topic ?? null,
      row.headers ?? '{}',
      row.deliverAfter ?? null,
    ],
  );
}

async function hotEvents(): Promise<number> {
  const { rows } = await r.admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.events`);
  return rows[0]!.n;
}

describe('the events table refuses what no relay can deliver', () => {
  it("refuses the producer role's hand-written rows: a partition outside or beside the aggregate's, a sequence below 1 …", async () => {
    const PARTITION = /^partition -?\d+ is not its aggregate's \(\d+\)$/;
    const NAME =
      /^aggregate_type, aggregate_id, event_type or topic holds a control character, a noncharacter or U\+FFFD$/;
    const EDGE = /^aggregate_type or event_type starts or ends with whitespace$/;
    const DESTINATION =
      /^the destination \(topic, or <aggregate_type>\.<event_type> without one\) holds whitespace, a wildcard, a leading \$ or an empty token$/;
    const NOT_OBJECT = /^headers are not a JSON object$/;
    const TRACE = /^traceparent or tracestate is not a string of printable ASCII$/;
    const HEADERS = /^headers are not all strings of printable ASCII under HTTP token names$/;
    const RESERVED = /^a header name is one the envelope or a transport gives a meaning/;
    const refused: Array<[string, Row, RegExp]> = [
      ['partition 999', { partition: 999 }, PARTITION],
      ['partition -5', { partition: -5 }, PARTITION],
      ["another aggregate's partition", { partition: 'wrong' }, PARTITION],
      ['sequence -7', { sequence: -7 }, /^sequence -7 is not from 1 to 9007199254740991$/],
      ['sequence 0', { sequence: 0 }, /^sequence 0 is not/],
      ['sequence 2^53', { sequence: '9007199254740992' }, /^sequence 9007199254740992 is not/],
      [
        'sequence_base at the sequence',
        { sequence: 5, sequenceBase: 5 },
        /^sequence_base 5 is not from 0 to the sequence \(5\) minus 1$/,
      ],
      ['sequence_base -1', { sequenceBase: -1 }, /^sequence_base -1 is not/],
      ['schema version 0', { schemaVersion: 0 }, /^schema_version 0 is below 1$/],
      ['next attempt at infinity', { nextAttemptAt: 'infinity' }, /^next_attempt_at is infinite: never due$/],
      ['deliver_after infinity', { deliverAfter: 'infinity' }, /^deliver_after is infinite or past/],
      [
        'deliver_after past a JavaScript Date',
        { deliverAfter: '275760-09-14 00:00:00+00' },
        /^deliver_after is/,
      ],
      ['an empty type', { type: '' }, /^event_type is empty or over 255 bytes$/],
      [
        'a type of 256 bytes',
        { type: `t${'é'.repeat(128)}`, topic: 'orders' },
        /^event_type is empty or over 255 bytes$/,
      ],
      ['an empty topic', { topic: '' }, /^topic is empty or over 255 bytes$/],
      ['a newline in the aggregate id', { aggregateId: 'a\nb' }, NAME],
      ['a noncharacter in the aggregate type', { aggregateType: 'order\u{10FFFF}' }, NAME],
      ['U+FFFD in the type', { type: 'order.\uFFFD' }, NAME],
      ['a DEL in the topic', { topic: 'orders\u007f' }, NAME],
      ['a type starting with a space', { type: ' order.placed', topic: 'orders' }, EDGE],
      ['an aggregate type ending with U+3000', { aggregateType: 'order\u3000', topic: 'orders' }, EDGE],
      ['a topic with a space', { topic: 'orders placed' }, DESTINATION],
      ['a topic with a NATS wildcard', { topic: 'orders.>' }, DESTINATION],
      ['a topic with an MQTT wildcard', { topic: 'orders/#' }, DESTINATION],
      ['a system topic', { topic: '$SYS.orders' }, DESTINATION],
      ['a topic with an empty token', { topic: 'orders..placed' }, DESTINATION],
      ['no topic, an aggregate type with a wildcard', { aggregateType: 'order*' }, DESTINATION],
      ['no topic, a type ending with a dot', { type: 'placed.' }, DESTINATION],
      [
        'no topic, a default topic of 256 bytes',
        { aggregateType: 'a'.repeat(128), type: 'b'.repeat(127) },
        /^the destination \(topic, or <aggregate_type>\.<event_type> without one\) is over 255 bytes$/,
      ],
      ['headers that are an array', { headers: '["a"]' }, NOT_OBJECT],
      ['headers that are JSON null', { headers: 'null' }, NOT_OBJECT],
      ['headers that are a number', { headers: '1' }, NOT_OBJECT],
      ['a traceparent that is a number', { headers: '{"traceparent": 1}' }, TRACE],
      [
        'a tracestate with a newline',
        { headers: '{"traceparent": "00-a-b-01", "tracestate": "a\\nb"}' },
        TRACE,
      ],
      ['a header that is a number', { headers: '{"x-n": 1}' }, HEADERS],
      ['a header that is an object', { headers: '{"x-n": {"a": "b"}}' }, HEADERS],
      ['a header name with a space', { headers: '{"x n": "v"}' }, HEADERS],
      ['a header value with a CR LF', { headers: '{"x-n": "a\\r\\nb"}' }, HEADERS],
      ['a header value with non-ASCII', { headers: '{"x-n": "café"}' }, HEADERS],
      ['a header value with DEL', { headers: '{"x-n": "a\u007fb"}' }, HEADERS],
      ['a ce-id header', { headers: '{"ce-id": "forged"}' }, RESERVED],
      ['a Type header', { headers: '{"Type": "order.cancelled"}' }, RESERVED],
      [
        'a cc header next to the trace context',
        { headers: '{"traceparent": "00-a-b-01", "cc": "x"}' },
        RESERVED,
      ],
      [
        'a header name of 256 characters',
        { headers: `{"x-${'n'.repeat(254)}": "v"}` },
        /^a header name is over 255 characters$/,
      ],
    ];
    for (const [what, row, fault] of refused) {
      const error = await insertByHand(row).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error, what).toMatchObject({ code: '23514', constraint: 'events_deliverable_check' });
      const message = (error as Error).message;
      expect(message, what).toMatch(/^tx-outbox: no relay could deliver this events row: /);
      expect(message.replace(/^tx-outbox: no relay could deliver this events row: /, ''), what).toMatch(
        fault,
      );
    }
    expect(await hotEvents()).toBe(0);
  });

  it("refuses a producer's sequence row below its base, with a negative base or past the safe integers", async () => {
    const producer = r.as('producer');
    const insert = `INSERT INTO ${s}.aggregate_sequences (aggregate_type, aggregate_id, last_sequence, sequence_base)
                    VALUES ('order', $1, $2, $3)`;
    await expect(producer.query(insert, ['seq-1', 3, 5])).rejects.toMatchObject({ code: '23514' });
    await expect(producer.query(insert, ['seq-2', 5, -1])).rejects.toMatchObject({ code: '23514' });
    await expect(producer.query(insert, ['seq-3', '9007199254740992', 0])).rejects.toMatchObject({
      code: '23514',
    });
    await producer.query(insert, ['seq-4', 3, 0]);
    await expect(
      producer.query(
        `UPDATE ${s}.aggregate_sequences SET last_sequence = -7 WHERE aggregate_type = 'order' AND aggregate_id = 'seq-4'`,
      ),
    ).rejects.toMatchObject({ code: '23514', constraint: 'aggregate_sequences_sequence_check' });
    await r.admin.query(`DELETE FROM ${s}.aggregate_sequences WHERE aggregate_id = 'seq-4'`);
  });

  it('refuses every header name enqueue reserves (src/producer/headers.ts), in any case, and every reserved prefix', async () => {
    expect(RESERVED_HEADER_NAMES.length).toBeGreaterThan(50);
    const names = [
      ...RESERVED_HEADER_NAMES.flatMap((name) => [name, name.toUpperCase()]),
      ...RESERVED_HEADER_PREFIXES.flatMap((prefix) => [`${prefix}x`, `${prefix.toUpperCase()}X`]),
    ];
    for (const name of names) {
      expect(() => headersJsonOf({ [name]: 'v' }, 'headers', {}), name).toThrow(OutboxValidationError);
    }
    // One round trip: each name's insert in a block of its own; the names the table took, if any.
    const literal = `ARRAY[${names.map((name) => `'${name.replaceAll("'", "''")}'`).join(', ')}]`;
    const accepted = await r
      .as('producer')
      .query(
        `DO $$
         DECLARE name text; taken text[] := '{}';
         BEGIN
           FOREACH name IN ARRAY ${literal} LOOP
             BEGIN
               INSERT INTO ${s}.events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload, headers)
               VALUES (gen_random_uuid(), ${s}.partition_of('order', 'h'), 'order', 'h', 1, 'order.placed', '{}',
                       jsonb_build_object(name, 'v'));
               taken := taken || name;
             EXCEPTION WHEN check_violation THEN NULL;
             END;
           END LOOP;
           IF cardinality(taken) > 0 THEN RAISE EXCEPTION 'taken: %', taken; END IF;
         END $$`,
      )
      .then(
        () => 'none',
        (error: Error) => error.message,
      );
    expect(accepted).toBe('none');
    expect(await hotEvents()).toBe(0);
  });

  it('enqueue still writes everything it accepts, edge cases included, and a relay delivers it', async () => {
    const tokenChars = "!#$%&'*+-.^_`|~09AZaz";
    const events: OutboxEvent[] = [
      { aggregateType: 'order', aggregateId: 'e1', type: 'order.placed', payload: { a: 1 } },
      {
        aggregateType: 'order',
        aggregateId: 'e1',
        type: 'order.paid',
        payload: { b: 2 },
        headers: {
          traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
          tracestate: 'rojo=00f067aa0ba902b7',
        },
      },
      {
        aggregateType: 'order',
        aggregateId: 'e2',
        type: 'order.placed',
        payload: [],
        headers: {
          [tokenChars]: 'a quote " a backslash \\ and ~',
          'x-empty': '',
          [`x-${'n'.repeat(253)}`]: 'v',
        },
      },
      // A long value of token characters is a value, not a header name over 255.
      {
        aggregateType: 'order',
        aggregateId: 'e4',
        type: 'order.placed',
        payload: {},
        headers: { 'x-long': 'v'.repeat(4000), 'x-after': `w${'x'.repeat(300)}` },
      },
      // Inner spaces, non-ASCII and 255 bytes in names, with a topic; an id with edge spaces.
      {
        aggregateType: 'bestellung größe',
        aggregateId: '  id mit leerzeichen 🙂 ',
        type: `t${'é'.repeat(127)}`,
        topic: 'orders.$placed',
        payload: null,
      },
      { aggregateType: 'o', aggregateId: 1, type: 'x', payload: 'text', schemaVersion: 2_147_483_647 },
      {
        aggregateType: 'a'.repeat(127),
        aggregateId: 'e3',
        type: 'b'.repeat(127),
        payload: new Uint8Array([0, 1, 2]),
        deliverAfter: new Date(Date.now() - 1000),
      },
    ];
    await inTransaction(r.as('producer'), (tx) => enqueue(tx, events.slice(0, 2), { schema: r.schema }));
    for (const event of events.slice(2)) {
      await inTransaction(r.as('producer'), (tx) => enqueue(tx, event, { schema: r.schema }));
    }
    // Caller versions, one and a batch.
    await inTransaction(r.as('producer'), (tx) =>
      enqueue(
        tx,
        { aggregateType: 'invoice', aggregateId: 'v1', type: 'invoice.issued', payload: {}, sequence: 1 },
        {
          schema: r.schema,
        },
      ),
    );
    await inTransaction(r.as('producer'), (tx) =>
      enqueue(
        tx,
        [2, 3].map((sequence) => ({
          aggregateType: 'invoice',
          aggregateId: 'v1',
          type: 'invoice.amended',
          payload: {},
          sequence,
        })),
        { schema: r.schema },
      ),
    );
    // The latest Date there is: accepted, not due within this test.
    await inTransaction(r.as('producer'), (tx) =>
      enqueue(
        tx,
        {
          aggregateType: 'later',
          aggregateId: 'l',
          type: 'later.x',
          payload: {},
          deliverAfter: new Date(8.64e15),
        },
        { schema: r.schema },
      ),
    );
    // A hand-written row enqueue could have written is a row like any other.
    await insertByHand({ aggregateId: 'by-hand', headers: '{"x-tenant": "acme"}' });
    const written = events.length + 3 + 1;
    expect(await hotEvents()).toBe(written + 1);

    const publisher = new RecordingPublisher();
    const relay = createRelay({ pool: r.as('relay'), publisher, schema: r.schema, pollIntervalMs: 20 });
    await relay.start();
    try {
      await waitFor(() => publisher.received.length === written, { what: 'every due event delivered' });
    } finally {
      await relay.stop({ timeout: 5000 });
    }
    expect(await hotEvents()).toBe(1);
    const byHand = publisher.received.find((m) => m.aggregateId === 'by-hand');
    expect(byHand?.headers).toEqual({ 'x-tenant': 'acme' });
    await r.admin.query(`DELETE FROM ${s}.events`);
  });
});

describe('skip markers', () => {
  it("take the skipped event's destination: an operator's dead skip writes one, a forged one without it is refused", async () => {
    // No topic: <aggregateType>.<type> is 255 bytes, with the marker's own type it would be 265.
    const event = { aggregateType: 'a'.repeat(200), aggregateId: 'long', type: 't'.repeat(54), payload: {} };
    const { eventId } = await inTransaction(r.as('producer'), (tx) =>
      enqueue(tx, event, { schema: r.schema }),
    );
    await r.admin.query(`UPDATE ${s}.events SET status = 'dead', dead_at = now() WHERE event_id = $1`, [
      eventId,
    ]);
    const skipped = await skipDead(r.as('operator'), {
      schema: r.schema,
      eventIds: [eventId],
      reason: 'test',
    });
    expect(skipped.skipped).toEqual([eventId]);
    const { rows } = await r.admin.query(
      `SELECT event_type, payload->>'skippedType' AS routed FROM ${s}.events`,
    );
    expect(rows).toEqual([{ event_type: 'tx-outbox.skipped', routed: 't'.repeat(54) }]);
    await r.admin.query(`DELETE FROM ${s}.events`);

    for (const payload of ['{}', '{"skippedType": 1}', '{"skippedType": "order placed"}']) {
      await expect(
        r.as('producer').query(
          `INSERT INTO ${s}.events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload)
           VALUES (gen_random_uuid(), ${s}.partition_of('order', 'm'), 'order', 'm', 1, 'tx-outbox.skipped', $1::jsonb)`,
          [payload],
        ),
        payload,
      ).rejects.toMatchObject({
        constraint: 'events_deliverable_check',
        message: expect.stringMatching(/destination|skippedType/),
      });
    }
  });
});

describe('migration 13 on tables that hold such rows', () => {
  it('fails naming the rows and their faults; once they are gone, it applies', async () => {
    const db = await createTestDb('evchk_migrate');
    const t = `"${db.schema}"`;
    const FAULT_ARGS =
      'smallint, text, text, bigint, bigint, text, integer, text, jsonb, jsonb, timestamptz, timestamptz, integer, boolean';
    const asVersion12 = async () => {
      await db.pool.query(`ALTER TABLE ${t}.events DROP CONSTRAINT IF EXISTS events_deliverable_check`);
      await db.pool.query(
        `ALTER TABLE ${t}.aggregate_sequences DROP CONSTRAINT IF EXISTS aggregate_sequences_sequence_check`,
      );
      await db.pool.query(`DROP FUNCTION IF EXISTS ${t}.event_fault(${t}.events)`);
      await db.pool.query(`DROP FUNCTION IF EXISTS ${t}.event_fault(${FAULT_ARGS})`);
      await db.pool.query(`DELETE FROM ${t}.migrations WHERE version = 13`);
    };
    try {
      await asVersion12();
      const { rows: ids } = await db.pool.query<{ id: string }>(
        `INSERT INTO ${t}.events (event_id, partition, aggregate_type, aggregate_id, sequence, event_type, payload)
         VALUES (gen_random_uuid(), 999, 'order', 'a', 1, 'order.placed', '{}'),
                (gen_random_uuid(), ${t}.partition_of('order', 'b'), 'order', 'b', -7, 'order.placed', '{}'),
                (gen_random_uuid(), ${t}.partition_of('order', 'c'), 'order', 'c', 1, 'order.placed', '{}')
         RETURNING id::text`,
      );
      const failed = await migrate(db.pool, { schema: db.schema }).catch((error: unknown) => error);
      expect(failed).toMatchObject({ code: '23514' });
      expect((failed as Error).message).toBe(
        `tx-outbox migration 13: 2 row(s) of ${t}.events could never be delivered, written outside enqueue: ` +
          `id ${ids[0]!.id}: partition 999 is not its aggregate's (${await partitionOf(db, 'a')}); ` +
          `id ${ids[1]!.id}: sequence -7 is not from 1 to 9007199254740991; fix or delete them, then migrate again.`,
      );
      // Nothing of it stayed: the migration is one transaction.
      const { rows } = await db.pool.query(`SELECT to_regprocedure($1) AS f`, [
        `${t}.event_fault(${t}.events)`,
      ]);
      expect(rows).toEqual([{ f: null }]);
      await db.pool.query(`DELETE FROM ${t}.events WHERE id = ANY ($1::bigint[])`, [
        ids.slice(0, 2).map((r) => r.id),
      ]);

      await db.pool.query(
        `INSERT INTO ${t}.aggregate_sequences (aggregate_type, aggregate_id, last_sequence, sequence_base) VALUES ('order', 'd', 3, 5)`,
      );
      const again = await migrate(db.pool, { schema: db.schema }).catch((error: unknown) => error);
      expect((again as Error).message).toMatch(
        /^tx-outbox migration 13: 1 row\(s\) of \S+\.aggregate_sequences have a sequence_base below 0 or above last_sequence, .* Find them with SELECT \* FROM \S+\.aggregate_sequences WHERE NOT \(.*\); fix or delete them, then migrate again\.$/,
      );
      await db.pool.query(`DELETE FROM ${t}.aggregate_sequences WHERE aggregate_id = 'd'`);

      expect((await migrate(db.pool, { schema: db.schema })).applied).toEqual([13]);
      const checks = await db.pool.query<{ conname: string; convalidated: boolean }>(
        `SELECT conname, convalidated FROM pg_constraint
         WHERE conrelid IN ('${t}.events'::regclass, '${t}.aggregate_sequences'::regclass)
           AND conname IN ('events_deliverable_check', 'aggregate_sequences_sequence_check')
         ORDER BY conname`,
      );
      expect(checks.rows).toEqual([
        { conname: 'aggregate_sequences_sequence_check', convalidated: true },
        { conname: 'events_deliverable_check', convalidated: true },
      ]);
    } finally {
      await db.close();
    }
  });
});

async function partitionOf(db: TestDb, aggregateId: string): Promise<number> {
  const { rows } = await db.pool.query<{ p: number }>(
    `SELECT "${db.schema}".partition_of('order', $1) AS p`,
    [aggregateId],
  );
  return rows[0]!.p;
}
