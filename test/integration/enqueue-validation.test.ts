/**
 * What `enqueue` refuses because no transport could send it (or would send something else):
 * every case names its field, and writes nothing, alone or as the third event of a batch.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { enqueue, MAX_BATCH } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import { createTestDb, inTransaction, type TestDb } from '../helpers/db.js';

let db: TestDb;
beforeAll(async () => {
  db = await createTestDb('enqueue_validation');
});
afterAll(async () => {
  await db?.close();
});

const count = async (): Promise<number> =>
  Number((await db.pool.query(`SELECT count(*) AS n FROM "${db.schema}".events`)).rows[0].n);

const base = { aggregateType: 'order', aggregateId: 'o-1', type: 'order.created', payload: { n: 1 } };
const event = (overrides: Record<string, unknown>): OutboxEvent => ({ ...base, ...overrides }) as OutboxEvent;
const headers = (h: unknown): OutboxEvent => event({ headers: h });
const payload = (p: unknown): OutboxEvent => event({ payload: p });

async function refusal(input: OutboxEvent | OutboxEvent[], options = {}): Promise<OutboxValidationError> {
  const error = await inTransaction(db.pool, (tx) =>
    enqueue(tx, input as OutboxEvent[], { schema: db.schema, ...options }),
  ).catch((e: unknown) => e);
  if (!(error instanceof OutboxValidationError)) {
    throw new Error(
      `expected an OutboxValidationError, got ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`,
    );
  }
  return error;
}

class Opaque {
  readonly #secret = 1;
  get secret(): number {
    return this.#secret;
  }
}

/** [what, event, field after `event`, message pattern] */
const refused: Array<[string, OutboxEvent, string, RegExp]> = [
  // aggregateType and type: ce-type / ce-aggregatetype header values, and the default topic.
  ['aggregateType with a space', event({ aggregateType: 'order item' }), '.aggregateType', /whitespace/],
  ['type with a newline', event({ type: 'order.created\n' }), '.type', /U\+000A \(a control character\)/],
  ['type with a tab', event({ type: 'order\tcreated' }), '.type', /U\+0009/],
  ['type with a leading space', event({ type: ' order.created' }), '.type', /starts with whitespace/],
  [
    'aggregateType ending with a no-break space',
    event({ aggregateType: 'order\u00a0' }),
    '.aggregateType',
    /ends with whitespace .*U\+00A0/,
  ],
  [
    'type with a noncharacter',
    event({ type: 'order.\ufdd0' }),
    '.type',
    /U\+FDD0 \(a Unicode noncharacter\)/,
  ],
  ['type with a lone surrogate', event({ type: 'order.\ud800' }), '.type', /lone UTF-16 surrogate/],
  ['type with an inner space, no topic', event({ type: 'order created' }), '.type', /whitespace/],
  ['aggregateType over 255 bytes', event({ aggregateType: 'a'.repeat(256) }), '.aggregateType', /256 bytes/],
  [
    'aggregateType with a wildcard, no topic',
    event({ aggregateType: 'order*' }),
    '.aggregateType',
    /wildcard/,
  ],
  ['type with a MQTT wildcard, no topic', event({ type: 'created.#' }), '.type', /wildcard/],
  ['type with a leading dot, no topic', event({ type: '.created' }), '.type', /empty token/],
  [
    'aggregateType with a trailing dot, no topic',
    event({ aggregateType: 'order.' }),
    '.aggregateType',
    /empty token/,
  ],
  ['aggregateType starting with $, no topic', event({ aggregateType: '$JS' }), '.aggregateType', /'\$'/],
  [
    'default topic over 255 bytes',
    event({ aggregateType: 'a'.repeat(200), type: 'b'.repeat(100) }),
    '.topic',
    /default topic .* 301 bytes/,
  ],
  [
    'default topic over 255 UTF-8 bytes (non-ASCII)',
    event({ aggregateType: 'é'.repeat(100), type: 'é'.repeat(30) }),
    '.topic',
    /default topic .* 261 bytes/,
  ],
  // aggregateId: a Kafka key, ce-subject / ce-aggregateid headers, an MQTT property.
  ['aggregateId with CR LF', event({ aggregateId: 'a\r\nb' }), '.aggregateId', /U\+000D/],
  ['aggregateId with a C1 control', event({ aggregateId: 'a\u0085b' }), '.aggregateId', /U\+0085/],
  [
    'aggregateId with a noncharacter (and a fix that names it)',
    event({ aggregateId: 'a\uffff' }),
    '.aggregateId',
    /noncharacter\) at index 1, .*\. Remove U\+FFFF \(a Unicode noncharacter\)/,
  ],
  ['aggregateId with U+FFFD', event({ aggregateId: 'bad\ufffd' }), '.aggregateId', /replacement character/],
  [
    'aggregateId with a lone surrogate (and a fix that names it)',
    event({ aggregateId: 'a\udc00' }),
    '.aggregateId',
    /\. Remove U\+DC00 \(a lone UTF-16 surrogate\)/,
  ],
  ['aggregateId over 255 UTF-8 bytes', event({ aggregateId: 'é'.repeat(128) }), '.aggregateId', /256 bytes/],
  ['aggregateId an unsafe integer', event({ aggregateId: 2 ** 60 }), '.aggregateId', /safe integer/],
  ['aggregateId a fraction', event({ aggregateId: 1.5 }), '.aggregateId', /safe integer/],
  // topic: NATS subject, MQTT topic, RabbitMQ routing key.
  ['topic with a NATS wildcard token', event({ topic: 'orders.*' }), '.topic', /wildcard/],
  ['topic with a NATS tail wildcard', event({ topic: 'orders.>' }), '.topic', /wildcard/],
  ['topic with an MQTT wildcard', event({ topic: 'orders/+/created' }), '.topic', /wildcard/],
  ['topic with an MQTT multi-level wildcard', event({ topic: 'orders/#' }), '.topic', /wildcard/],
  ['topic on a system subject', event({ topic: '$JS.API.STREAM.DELETE.ORDERS' }), '.topic', /'\$'/],
  ['topic with a leading dot', event({ topic: '.orders' }), '.topic', /empty token/],
  ['topic with a double dot', event({ topic: 'orders..created' }), '.topic', /empty token/],
  ['topic with a line separator', event({ topic: 'orders\u2028x' }), '.topic', /whitespace/],
  ['topic over 255 UTF-8 bytes', event({ topic: 'é'.repeat(128) }), '.topic', /256 bytes/],
  // header names: RFC 9110 tokens, none a transport or the envelope gives a meaning.
  ['header name with a space', headers({ 'x y': 'v' }), '.headers["x y"]', /HTTP token/],
  ['header name with a colon', headers({ 'x:y': 'v' }), '.headers["x:y"]', /HTTP token/],
  ['header name non-ASCII', headers({ 'x-é': 'v' }), '.headers["x-é"]', /HTTP token/],
  ['header name with NUL', headers({ 'x\u0000': 'v' }), '.headers["x\\u0000"]', /HTTP token/],
  ['empty header name', headers({ '': 'v' }), '.headers[""]', /empty/],
  ['header ce-id', headers({ 'ce-id': 'v' }), '.headers["ce-id"]', /CloudEvents envelope/],
  ['header CE-Type', headers({ 'CE-Type': 'v' }), '.headers["CE-Type"]', /CloudEvents envelope/],
  ['header ce_id (Kafka binding)', headers({ ce_id: 'v' }), '.headers["ce_id"]', /Kafka/],
  [
    'header cloudEvents_id (AMQP binding)',
    headers({ cloudEvents_id: 'v' }),
    '.headers["cloudEvents_id"]',
    /AMQP/,
  ],
  ['header Nats-Msg-Id', headers({ 'Nats-Msg-Id': 'v' }), '.headers["Nats-Msg-Id"]', /NATS/],
  ['header Nats-Rollup', headers({ 'Nats-Rollup': 'all' }), '.headers["Nats-Rollup"]', /NATS/],
  [
    'header webhook-signature',
    headers({ 'webhook-signature': 'v' }),
    '.headers["webhook-signature"]',
    /Standard Webhooks/,
  ],
  [
    'header content-type',
    headers({ 'Content-Type': 'text/plain' }),
    '.headers["Content-Type"]',
    /from the payload/,
  ],
  [
    'header transfer-encoding',
    headers({ 'transfer-encoding': 'chunked' }),
    '.headers["transfer-encoding"]',
    /HTTP connection/,
  ],
  ['header host', headers({ host: 'example.com' }), '.headers["host"]', /HTTP connection/],
  ['header CC', headers({ CC: 'other.key' }), '.headers["CC"]', /RabbitMQ/],
  ['header BCC', headers({ BCC: 'other.key' }), '.headers["BCC"]', /RabbitMQ/],
  ['header payload', headers({ payload: 'v' }), '.headers["payload"]', /Redis/],
  ['header Authorization', headers({ Authorization: 'Bearer t' }), '.headers["Authorization"]', /credential/],
  [
    'header txo-signature',
    headers({ 'txo-signature': 'v1,x' }),
    '.headers["txo-signature"]',
    /tx-outbox's own/,
  ],
  ['header id', headers({ id: 'v' }), '.headers["id"]', /CloudEvents attribute/],
  // names the cloudevents SDK acts on when they arrive as attributes (MQTT 5, structured mode).
  ['header schemaurl', headers({ schemaurl: 'v' }), '.headers["schemaurl"]', /CloudEvents 0\.3/],
  [
    'header DataContentEncoding',
    headers({ DataContentEncoding: 'base64' }),
    '.headers["DataContentEncoding"]',
    /CloudEvents 0\.3/,
  ],
  ['header txoheaders', headers({ txoheaders: '{}' }), '.headers["txoheaders"]', /tx-outbox's own/],
  ['header validate', headers({ validate: 'v' }), '.headers["validate"]', /method of the cloudevents SDK/],
  ['header toString', headers({ toString: 'v' }), '.headers["toString"]', /method of the cloudevents SDK/],
  ['header constructor', headers({ constructor: 'v' }), '.headers["constructor"]', /method/],
  ['header __proto__', headers(JSON.parse('{"__proto__":"v"}')), '.headers["__proto__"]', /JavaScript/],
  [
    'headers differing in case',
    headers({ 'X-Tenant': 'a', 'x-tenant': 'b' }),
    '.headers["x-tenant"]',
    /repeats/,
  ],
  // header values: printable ASCII, nothing NATS or HTTP would strip.
  ['header value with CR LF', headers({ 'x-a': 'a\r\nInjected: 1' }), '.headers["x-a"]', /U\+000D/],
  ['header value with NUL', headers({ 'x-a': 'a\u0000b' }), '.headers["x-a"]', /U\+0000/],
  ['header value with a tab', headers({ 'x-a': 'a\tb' }), '.headers["x-a"]', /U\+0009/],
  ['header value with DEL', headers({ 'x-a': 'a\u007fb' }), '.headers["x-a"]', /U\+007F/],
  ['header value non-ASCII', headers({ 'x-a': '5 €' }), '.headers["x-a"]', /U\+20AC .*non-ASCII/],
  ['header value with a leading space', headers({ 'x-a': ' v' }), '.headers["x-a"]', /space/],
  ['header value with a trailing space', headers({ 'x-a': 'v ' }), '.headers["x-a"]', /space/],
  ['header value null', headers({ 'x-a': null }), '.headers["x-a"]', /null/],
  ['headers as a Map', headers(new Map([['x-a', 'v']])), '.headers', /Map/],
  ['headers as an array', headers([['x-a', 'v']]), '.headers', /array/],
  [
    'headers over 8 KiB',
    headers(Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`x-h${i}`, 'v'.repeat(1000)]))),
    '.headers',
    /8192 bytes/,
  ],
  [
    // 16 KiB of request head on the webhook (txo-signed-headers lists each name again): a 431.
    'headers over 8 KiB counting each name twice',
    headers(Object.fromEntries(Array.from({ length: 32 }, (_, i) => [`x-${i}`.padEnd(252, 'n'), '']))),
    '.headers',
    /8192 bytes, counting each header as 2 × name \+ value \+ 5/,
  ],
  // payloads JSON would not write faithfully.
  ['NaN', payload({ total: Number.NaN }), '.payload.total', /NaN/],
  ['Infinity in an array', payload({ list: [1, Number.POSITIVE_INFINITY] }), '.payload.list[1]', /Infinity/],
  ['a Map', payload(new Map([['a', 1]])), '.payload', /Map/],
  ['a nested Set', payload({ tags: new Set(['a']) }), '.payload.tags', /Set/],
  ['an ArrayBuffer', payload(new ArrayBuffer(4)), '.payload', /ArrayBuffer/],
  ['a nested ArrayBuffer', payload({ raw: new ArrayBuffer(4) }), '.payload.raw', /ArrayBuffer/],
  ['a DataView', payload(new DataView(new ArrayBuffer(4))), '.payload', /DataView/],
  ['an Int16Array', payload(new Int16Array([1, 2])), '.payload', /Int16Array/],
  ['a Uint8ClampedArray', payload(new Uint8ClampedArray([1, 2])), '.payload', /Uint8ClampedArray/],
  ['a nested Float64Array', payload({ v: new Float64Array([1.5]) }), '.payload.v', /Float64Array/],
  ['a nested Uint8Array', payload({ bytes: new Uint8Array([1]) }), '.payload.bytes', /inside the JSON/],
  ['a nested Buffer', payload({ file: Buffer.from('hi') }), '.payload.file', /Buffer inside the JSON/],
  ['undefined in an array', payload({ a: [undefined] }), '.payload.a[0]', /undefined/],
  ['a function property', payload({ f: () => 1 }), '.payload.f', /function/],
  ['a symbol in an array', payload([Symbol('s')]), '.payload[0]', /symbol/],
  ['undefined', payload(undefined), '.payload', /undefined/],
  ['an invalid Date', payload({ at: new Date(Number.NaN) }), '.payload.at', /invalid Date/],
  ['an Error', payload({ cause: new Error('boom') }), '.payload.cause', /Error/],
  ['a RegExp', payload({ re: /x/ }), '.payload.re', /RegExp/],
  [
    'a class instance with no enumerable fields',
    payload({ o: new Opaque() }),
    '.payload.o',
    /no enumerable fields/,
  ],
  [
    'data on an object’s prototype (Object.create(defaults))',
    payload({ order: Object.assign(Object.create({ region: 'eu' }), { id: 1 }) }),
    '.payload.order',
    /inherits "region" from its prototype, which JSON leaves out/,
  ],
  ['a NUL in a key', payload({ 'a\u0000': 1 }), '.payload["a\\u0000"]', /NUL/],
  ['a lone surrogate deep inside', payload({ a: [{ b: 'x\udfff' }] }), '.payload.a[0].b', /surrogate/],
  [
    'a cycle',
    (() => {
      const a: Record<string, unknown> = { b: {} };
      (a['b'] as Record<string, unknown>)['back'] = a;
      return payload(a);
    })(),
    '.payload.b.back',
    /cycle/,
  ],
  [
    'a toJSON that throws',
    payload({
      x: {
        toJSON() {
          throw new Error('no');
        },
      },
    }),
    '.payload.x',
    /toJSON that threw \(no\)/,
  ],
];

describe('enqueue refuses what no transport can send, naming the field, and writes nothing', () => {
  for (const [what, bad, field, pattern] of refused) {
    it(what, async () => {
      const before = await count();
      const alone = await refusal(bad);
      expect(alone.field).toBe(`event${field}`);
      expect(alone.message).toContain(`event${field}`);
      expect(alone.message).toMatch(pattern);
      const third = await refusal([event({ aggregateId: 'b-1' }), event({ aggregateId: 'b-2' }), bad]);
      expect(third.field).toBe(`events[2]${field}`);
      expect(await count()).toBe(before);
    });
  }

  it('never quotes a header value (it may be a secret)', async () => {
    const error = await refusal(headers({ 'x-api-key': 's3cr3t-t0ken\n' }));
    expect(error.field).toBe('event.headers["x-api-key"]');
    expect(error.message).not.toContain('s3cr3t');
  });

  it('a payload nested too deeply for JSON.stringify is an OutboxValidationError', async () => {
    const root: Record<string, unknown> = {};
    let node = root;
    for (let i = 0; i < 100_000; i++) {
      const next: Record<string, unknown> = {};
      node['a'] = next;
      node = next;
    }
    const error = await refusal(payload(root));
    expect(error.field.startsWith('event.payload')).toBe(true);
  });
});

describe('a batch too large in total', () => {
  it('is refused as soon as its running total passes maxBatchBytes, before anything is sent', async () => {
    const before = await count();
    const events = Array.from({ length: 5 }, (_, i) => payload({ i, pad: 'p'.repeat(400) }));
    const error = await refusal(events, { maxBatchBytes: 1000 });
    expect(error.field).toBe('events');
    expect(error.message).toMatch(
      /total \d+ bytes of payloads and headers by events\[2\], over maxBatchBytes \(1000\)/,
    );
    expect(await count()).toBe(before);
    // Under the cap, the same batch goes in.
    await inTransaction(db.pool, (tx) => enqueue(tx, events, { schema: db.schema, maxBatchBytes: 4000 }));
    expect(await count()).toBe(before + 5);
  });

  it('counts headers too, and a single event', async () => {
    const error = await refusal(event({ headers: { 'x-pad': 'h'.repeat(900) }, payload: 1 }), {
      maxBatchBytes: 500,
    });
    expect(error.field).toBe('event');
    expect(error.message).toMatch(/takes \d+ bytes of payload and headers, over maxBatchBytes \(500\)/);
  });

  it(`refuses more than ${MAX_BATCH} events in one call, before anything is sent`, async () => {
    const before = await count();
    const events = Array.from({ length: MAX_BATCH + 1 }, (_, i) => event({ aggregateId: `many-${i % 10}` }));
    const error = await refusal(events);
    expect(error.field).toBe('events');
    expect(error.message).toBe('events: holds 10001 events. Split it into batches of 10000.');
    expect(await count()).toBe(before);
  });

  it('refuses a maxBatchBytes that is not an integer from 1 to 128 MiB', async () => {
    for (const bad of [0, 1.5, 256 * 1024 * 1024, '1000']) {
      const error = await refusal(base as OutboxEvent, { maxBatchBytes: bad });
      expect(error.field).toBe('maxBatchBytes');
      expect(error.message).toMatch(/from 1 to 134217728/);
    }
  });
});

describe('what is accepted is stored exactly', () => {
  it('edge-but-valid names, headers and payloads', async () => {
    const view = new Uint8Array([9, 0, 1, 2, 255, 9]).subarray(1, 5);
    const json = { s: 'text that looks like escapes: \\u0000 \\ud800', clé: 'été 😀', n: [0, -1.5, 1e21] };
    const events: OutboxEvent[] = [
      {
        aggregateType: 'order_line-item',
        aggregateId: 'commande été-€-😀/x:y%20"q"',
        type: 'order.created.v2',
        topic: 'commandes.été/x:y-z_1',
        payload: json,
        headers: {
          'x-note': 'a "quoted" value; with, commas % and  spaces',
          'x-empty': '',
          "x-token!#$%&'*+.^_`|~": '%E2%82%AC',
        },
      },
      { aggregateType: 'file', aggregateId: 2n ** 70n, type: 'file.put', payload: view },
      // Every binding carries edge spaces (HTTP and NATS percent-encode them).
      { aggregateType: 'edge', aggregateId: ' 42\u00a0', type: 'edge.kept', payload: {} },
      // A type is any CloudEvents String without edge whitespace; with a topic, inner spaces too.
      {
        aggregateType: 'Bestellung Ä',
        aggregateId: 't-1',
        type: 'commande créée 注文 😀 "v2"',
        topic: 'commandes',
        payload: {},
      },
      // Without one, a non-ASCII default topic of 255 UTF-8 bytes.
      { aggregateType: 'é'.repeat(100), aggregateId: 't-2', type: 'é'.repeat(27), payload: {} },
    ];
    const results = await inTransaction(db.pool, (tx) => enqueue(tx, events, { schema: db.schema }));
    const { rows } = await db.pool.query(
      `SELECT aggregate_type, aggregate_id, event_type, topic, payload, payload_bytes, headers
         FROM "${db.schema}".events WHERE event_id = ANY($1::uuid[]) ORDER BY sequence, aggregate_type DESC`,
      [results.map((r) => r.eventId)],
    );
    const [first, second] = [
      rows.find((r) => r.aggregate_type === 'order_line-item'),
      rows.find((r) => r.aggregate_type === 'file'),
    ];
    expect(first).toMatchObject({
      aggregate_id: events[0]!.aggregateId,
      event_type: 'order.created.v2',
      topic: events[0]!.topic,
      payload: json,
      payload_bytes: null,
      headers: events[0]!.headers,
    });
    expect(second.aggregate_id).toBe('1180591620717411303424');
    expect(rows.find((r) => r.aggregate_type === 'edge').aggregate_id).toBe(' 42\u00a0');
    expect([...second.payload_bytes]).toEqual([0, 1, 2, 255]);
    expect(rows.find((r) => r.aggregate_type === 'Bestellung Ä')).toMatchObject({
      event_type: 'commande créée 注文 😀 "v2"',
      topic: 'commandes',
    });
    expect(rows.find((r) => r.aggregate_type === 'é'.repeat(100))).toMatchObject({
      event_type: 'é'.repeat(27),
    });
  });
});
