/**
 * The Kafka publisher's pure parts, with no broker: topic names, the record mapping, the
 * partitioner, the split into produce requests, broker addresses.
 */
import { randomBytes } from 'node:crypto';
import { murmur2 as clientMurmur2 } from '@platformatic/kafka';
import { describe, expect, it } from 'vitest';
import type { PublishOutcome } from '../../src/publishers/contract.js';
import { bootstrapAddresses, parseAddress, uniqueAddresses } from '../../src/publishers/kafka/addresses.js';
import { defaultTopic, murmur2, partitionFor, topicProblem } from '../../src/publishers/kafka/index.js';
import { chunk, groupBy, MAX_REQUEST_BYTES } from '../../src/publishers/kafka/requests.js';
import { BATCH_OVERHEAD, headerName, type Item, prepare, records } from '../../src/publishers/kafka/wire.js';
import { contractMessage } from '../../src/testing/publisher-contract.js';

const settings = { destination: defaultTopic, source: 'tx-outbox', maxMessageBytes: 1_048_576 };

function item(index: number, partition: number, bytes: number, topic = 't'): Item {
  const key = Buffer.from(`k${index}`);
  return { index, topic, key, value: Buffer.alloc(0), headers: new Map(), bytes, partition };
}

function failure(outcome: Item | PublishOutcome): { retryable: boolean; message: string } {
  if (!('ok' in outcome) || outcome.ok) throw new Error(`expected a failure, got ${JSON.stringify(outcome)}`);
  return { retryable: outcome.retryable, message: outcome.error.message };
}

describe('topic names', () => {
  it('refuses what Kafka refuses', () => {
    expect(topicProblem('orders.created_v2-EU')).toBeUndefined();
    expect(topicProblem('a'.repeat(249))).toBeUndefined();
    expect(topicProblem('a'.repeat(250))).toBe('is 250 characters long; Kafka allows at most 249');
    expect(topicProblem('')).toBe('is empty');
    expect(topicProblem('.')).toBe('is "." or ".."');
    expect(topicProblem('..')).toBe('is "." or ".."');
    const rule = 'has characters other than ASCII letters, digits, ".", "_" and "-"';
    expect(topicProblem('orders/created')).toBe(`${rule} ("/" U+002F at index 6)`);
    expect(topicProblem('créé')).toBe(`${rule} ("é" U+00E9 at index 2)`);
    expect(topicProblem('urn:orders')).toBe(`${rule} (":" U+003A at index 3)`);
    expect(topicProblem('order created')).toBe(`${rule} (" " U+0020 at index 5)`);
    expect(topicProblem('a😀')).toBe(`${rule} ("😀" U+1F600 at index 1)`);
    expect(topicProblem('no\u00a0break')).toBe(`${rule} ("\u00a0" U+00A0 at index 2)`);
  });

  it('defaults to message.topic, else aggregateType.type', () => {
    expect(defaultTopic(contractMessage('orders', 'a', 1))).toBe('orders');
    const untopped = contractMessage('', 'a', 1, { topic: null, aggregateType: 'order', type: 'shipped' });
    expect(defaultTopic(untopped)).toBe('order.shipped');
    expect(defaultTopic({ ...untopped, topic: '' })).toBe('order.shipped');
  });
});

describe('wire: prepare and records', () => {
  it('keys by aggregate id, keeps the payload bytes, carries the envelope in headers', () => {
    const message = contractMessage('orders', 'order-7', 3);
    const prepared = prepare(message, 4, { ...settings, source: 'shop' });
    if ('ok' in prepared) throw new Error('expected an item');
    expect(prepared.index).toBe(4);
    expect(prepared.topic).toBe('orders');
    expect(prepared.partition).toBe(-1);
    expect(prepared.key.toString()).toBe('order-7');
    expect(prepared.value.buffer).toBe((message.payload as Buffer).buffer); // not copied
    // The Kafka binding (§3.2): user headers first, then ce_<attribute>, the data content type
    // in content-type (so no ce_datacontenttype).
    const headers = [...prepared.headers].map(([k, v]) => [k.toString(), v.toString()]);
    expect(headers).toEqual([
      ['traceparent', message.headers['traceparent']],
      ['ce_specversion', '1.0'],
      ['ce_id', message.eventId],
      ['ce_source', 'shop'],
      ['ce_type', 'contract.happened'],
      ['ce_time', message.createdAt.toISOString()],
      ['ce_subject', 'order-7'],
      ['ce_aggregatetype', 'contract'],
      ['ce_aggregateid', 'order-7'],
      ['ce_sequence', '0000000000000000003'],
      ['ce_aggregatesequence', '3'],
      ['ce_schemaversion', '2'],
      ['content-type', 'application/json'],
    ]);
    // The size bound: 36 per record, plus key, value, and 10 per header plus its bytes.
    let bytes = 36 + prepared.key.length + prepared.value.length;
    for (const [k, v] of prepared.headers) bytes += 10 + k.length + v.length;
    expect(prepared.bytes).toBe(bytes);

    prepared.partition = 2;
    expect(records([prepared])).toEqual([
      { topic: 'orders', partition: 2, key: prepared.key, value: prepared.value, headers: prepared.headers },
    ]);
  });

  it('header values are the attributes as UTF-8, never percent-encoded; the key is the id as UTF-8', () => {
    const id = ' café 50%41 "x" 😀 ';
    const message = contractMessage('orders', id, 1, {
      type: 'order.créé%20',
      contentType: 'application/octet-stream',
    });
    const prepared = prepare(message, 0, { ...settings, source: 'urn:shop:a%20b' }) as Item;
    const value = (name: string): Buffer | undefined =>
      [...prepared.headers].find(([k]) => k.toString() === name)?.[1];
    expect(prepared.key.equals(Buffer.from(id, 'utf8'))).toBe(true);
    expect(value('ce_aggregateid')?.equals(Buffer.from(id, 'utf8'))).toBe(true);
    expect(value('ce_subject')?.equals(Buffer.from(id, 'utf8'))).toBe(true);
    expect(value('ce_type')?.toString()).toBe('order.créé%20');
    expect(value('ce_source')?.toString()).toBe('urn:shop:a%20b');
    expect(value('content-type')?.toString()).toBe('application/octet-stream');
    expect(value('ce_datacontenttype')).toBeUndefined();
    expect([...prepared.headers.keys()].some((k) => k.toString().startsWith('ce-'))).toBe(false);
  });

  it('one Buffer per header name, shared by every record', () => {
    expect(headerName('ce_id')).toBe(headerName('ce_id'));
    const a = prepare(contractMessage('t', 'a', 1), 0, settings) as Item;
    const b = prepare(contractMessage('t', 'b', 1), 1, settings) as Item;
    const [aNames, bNames] = [[...a.headers.keys()], [...b.headers.keys()]];
    expect(aNames).toEqual(bNames);
    for (const [i, name] of aNames.entries()) expect(name).toBe(bNames[i]);
    expect(aNames.at(-1)).toBe(headerName('content-type'));
  });

  it('fails permanently: a topic function that throws, a bad topic name, a message over maxMessageBytes', () => {
    const threw = prepare(contractMessage('t', 'a', 1), 0, {
      ...settings,
      destination: () => {
        throw new Error('no route');
      },
    });
    expect(failure(threw)).toEqual({
      retryable: false,
      message: expect.stringMatching(/^The topic function threw for event .*: no route$/),
    });
    expect(failure(prepare(contractMessage('orders/created', 'a', 1), 0, settings))).toEqual({
      retryable: false,
      message: expect.stringMatching(
        /^Kafka rejects topic "orders\/created" \(event .*\): it has characters other than ASCII letters, digits, "\.", "_" and "-" \("\/" U\+002F at index 6\)\. Enqueue it with a valid topic, or map topics to valid names with the `destination` option$/,
      ),
    });
    const notString = prepare(contractMessage('t', 'a', 1), 0, {
      ...settings,
      destination: () => 42 as unknown as string,
    });
    expect(failure(notString).message).toMatch(/: it is not a string\. Enqueue it with a valid topic/);
    const fits = prepare(contractMessage('t', 'a', 1), 0, settings) as Item;
    const limit = fits.bytes + BATCH_OVERHEAD;
    expect('ok' in prepare(contractMessage('t', 'a', 1), 0, { ...settings, maxMessageBytes: limit })).toBe(
      false,
    );
    const over = prepare(contractMessage('t', 'a', 1), 0, { ...settings, maxMessageBytes: limit - 1 });
    expect(failure(over)).toEqual({
      retryable: false,
      message: expect.stringMatching(/exceeds maxMessageBytes \(\d+\); raise it together with/),
    });
  });
});

describe('partitioner', () => {
  it('murmur2 matches Kafka (Utils.murmur2) and the client library', () => {
    // Kafka's UtilsTest.testMurmur2 cases.
    const cases: [string, number][] = [
      ['21', -973932308],
      ['foobar', -790332482],
      ['a-little-bit-long-string', -985981536],
      ['a-little-bit-longer-string', -1486304829],
      ['lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8', -58897971],
      ['abc', 479470107],
    ];
    for (const [input, hash] of cases) expect(murmur2(Buffer.from(input))).toBe(hash);
    for (let i = 0; i < 200; i++) {
      const key = randomBytes(i % 40);
      expect(murmur2(key)).toBe(clientMurmur2(key));
    }
  });

  it('partitionFor is the positive hash modulo the partition count, as the Java client', () => {
    // murmur2('foobar') = -790332482; & 0x7fffffff = 1357151166.
    expect(partitionFor(Buffer.from('foobar'), 3)).toBe(1357151166 % 3);
    expect(partitionFor(Buffer.from('abc'), 7)).toBe(479470107 % 7);
    for (let i = 0; i < 100; i++) {
      const p = partitionFor(randomBytes(8), 5);
      expect(p).toBeGreaterThanOrEqual(0);
      expect(p).toBeLessThan(5);
    }
  });
});

describe('requests: chunk', () => {
  it('a batch that fits is one request', () => {
    const items = [item(0, 0, 100), item(1, 1, 100), item(2, 0, 100)];
    expect(chunk(items, 1_000)).toEqual([items]);
  });

  it("splits a partition's records over maxBytes into several requests, in order", () => {
    // Per partition a request holds 61 + n × 300 ≤ 1000: 3 records.
    const items = Array.from({ length: 7 }, (_, i) => item(i, 0, 300));
    const requests = chunk(items, 1_000);
    expect(requests.map((r) => r.map((i) => i.index))).toEqual([[0, 1, 2], [3, 4, 5], [6]]);
  });

  it("other partitions fill the earlier requests; a partition's next record never goes before its latest", () => {
    const items = [item(0, 0, 600), item(1, 0, 600), item(2, 1, 600), item(3, 0, 100)];
    const requests = chunk(items, 1_000).map((r) => r.map((i) => i.index));
    expect(requests).toEqual([
      [0, 2],
      [1, 3],
    ]);
    // A small record of partition 0 after a big one: it may not move back into the first request.
    const later = chunk([item(0, 0, 100), item(1, 0, 900), item(2, 0, 100)], 1_000);
    expect(later.map((r) => r.map((i) => i.index))).toEqual([[0], [1], [2]]);
  });

  it('keeps a request under MAX_REQUEST_BYTES across partitions', () => {
    const size = 1_000_000;
    const count = Math.floor(MAX_REQUEST_BYTES / size) + 1;
    const items = Array.from({ length: count }, (_, i) => item(i, i, size));
    const requests = chunk(items, 2 * size);
    expect(requests).toHaveLength(2);
    expect(requests[0]).toHaveLength(count - 1);
  });

  it('groupBy keeps first-seen group order and item order', () => {
    const items = [item(0, 1, 1, 'b'), item(1, 0, 1, 'a'), item(2, 2, 1, 'b')];
    const groups = groupBy(items, (i) => i.topic);
    expect([...groups.keys()]).toEqual(['b', 'a']);
    expect(groups.get('b')!.map((i) => i.index)).toEqual([0, 2]);
  });
});

describe('addresses', () => {
  it('parses host:port and [v6]:port', () => {
    expect(parseAddress('127.0.0.1:9092')).toEqual({ host: '127.0.0.1', port: 9092 });
    expect(parseAddress('[::1]:19092')).toEqual({ host: '::1', port: 19092 });
    expect(parseAddress('kafka-1.internal:9093')).toEqual({ host: 'kafka-1.internal', port: 9093 });
  });

  it('bootstraps from the configured brokers, then the mapped metadata brokers, each once', () => {
    const bootstrap = [{ host: 'proxy', port: 1 }];
    const seen = [
      { host: '10.0.0.1', port: 9092 },
      { host: '10.0.0.2', port: 9092 },
    ];
    const map = (b: { host: string; port: number }) =>
      b.host === '10.0.0.1' ? { host: 'proxy', port: 1 } : { host: 'proxy', port: 2 };
    expect(bootstrapAddresses(bootstrap, seen, map)).toEqual([
      { host: 'proxy', port: 1 },
      { host: 'proxy', port: 2 },
    ]);
    expect(bootstrapAddresses(bootstrap, undefined, map)).toEqual(bootstrap);
    expect(
      uniqueAddresses([
        { host: 'a', port: 1 },
        { host: 'a', port: 1 },
        { host: 'a', port: 2 },
      ]),
    ).toEqual([
      { host: 'a', port: 1 },
      { host: 'a', port: 2 },
    ]);
  });
});
