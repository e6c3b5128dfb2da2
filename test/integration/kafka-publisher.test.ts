/**
 * The Kafka publisher against a real broker on 127.0.0.1:9092 (`bash scripts/kafka.sh start`;
 * CI starts it). Without a broker there, the whole file is skipped with a message. The
 * publisher contract run is in test/contract/kafka.contract.test.ts.
 */
import { randomBytes } from 'node:crypto';
import { type Admin, type Consumer, Producer } from '@platformatic/kafka';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { isBrokerUnavailable, OutboxError, OutboxValidationError, PublishError } from '../../src/errors.js';
import type { OutboxMessage, Publisher, PublishOutcome } from '../../src/publishers/contract.js';
import {
  defaultTopic,
  type KafkaPublisherOptions,
  kafkaPublisher,
  partitionFor,
  topicProblem,
} from '../../src/publishers/kafka/index.js';
import { contractMessage } from '../../src/testing/index.js';
import { TcpProxy } from '../../src/testing/tcp-proxy.js';
import { KAFKA_BROKER, KAFKA_HOST, KAFKA_PORT, kafkaAvailable } from '../helpers/kafka.js';
import { kafkaReader, readTopic as readStored, type Stored } from '../helpers/kafka-read.js';

const BROKER = KAFKA_BROKER;
const MiB = 1024 * 1024;

const kafkaUp = await kafkaAvailable('kafka-publisher.test.ts:');

const never = new AbortController().signal;
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

let admin: Admin;
let reader: Consumer;
const topics = new Set<string>();
const publishers: Publisher[] = [];

/** Reads everything the topic holds, once `expected` arrived (see helpers/kafka-read.ts). */
function readTopic(topic: string, expected: number, timeoutMs = 15_000): Promise<Stored[]> {
  return readStored(reader, topic, expected, timeoutMs);
}

async function createTopic(topic: string, partitions: number): Promise<void> {
  topics.add(topic);
  await admin.createTopics({ topics: [topic], partitions, replicas: 1 });
}

function publisher(options: Partial<KafkaPublisherOptions> = {}): Publisher {
  const created = kafkaPublisher({ url: [BROKER], clientId: 'txo-kafka-test', ...options });
  publishers.push(created);
  return created;
}

function message(topic: string, aggregateId: string, sequence = 1, extra: Partial<OutboxMessage> = {}) {
  return contractMessage(topic, aggregateId, sequence, extra);
}

function failure(outcome: PublishOutcome | undefined): PublishError {
  if (outcome === undefined || outcome.ok)
    throw new Error(`expected a failure, got ${JSON.stringify(outcome)}`);
  expect(outcome.error).toBeInstanceOf(PublishError);
  return outcome.error as PublishError;
}

function uniqueTopic(label: string): string {
  const topic = `txo-kafka-${label}-${randomBytes(4).toString('hex')}`;
  topics.add(topic);
  return topic;
}

describe.skipIf(!kafkaUp)(`Kafka on ${BROKER}`, () => {
  beforeAll(() => {
    ({ admin, reader } = kafkaReader('txo-kafka-test'));
  });

  afterAll(async () => {
    await Promise.allSettled(publishers.map((p) => p.close()));
    if (topics.size > 0) await admin?.deleteTopics({ topics: [...topics] }).catch(() => undefined);
    await reader?.close();
    await admin?.close();
  }, 60_000);

  describe('kafkaPublisher', () => {
    it('keys each record by its aggregate id: an aggregate stays in one partition, in order (3 partitions)', async () => {
      const topic = uniqueTopic('keys');
      await createTopic(topic, 3);
      const pub = publisher();
      const aggregates = Array.from({ length: 30 }, (_, i) => `order-${i}`);
      for (let sequence = 1; sequence <= 5; sequence++) {
        const outcomes = await pub.publish(
          aggregates.map((id) => message(topic, id, sequence)),
          never,
        );
        expect(outcomes.every((o) => o.ok)).toBe(true);
      }
      const stored = await readTopic(topic, 150);
      expect(stored).toHaveLength(150);
      const used = new Set<number>();
      for (const id of aggregates) {
        const mine = stored.filter((r) => r.aggregateId === id);
        expect(mine.map((r) => r.sequence)).toEqual([1, 2, 3, 4, 5]);
        expect(new Set(mine.map((r) => r.partition)).size).toBe(1);
        expect(mine[0]!.key).toBe(id);
        // The Java client's default partitioner would pick the same partition.
        expect(mine[0]!.partition).toBe(partitionFor(Buffer.from(id), 3));
        used.add(mine[0]!.partition);
      }
      expect(used.size).toBe(3);
    });

    it('uses the idempotent producer: every stored batch carries a producer id', async () => {
      const topic = uniqueTopic('idempotent');
      await createTopic(topic, 1);
      const pub = publisher();
      const outcomes = await pub.publish(
        Array.from({ length: 10 }, (_, i) => message(topic, `i${i}`)),
        never,
      );
      expect(outcomes.every((o) => o.ok)).toBe(true);
      const stored = await readTopic(topic, 10);
      expect(stored).toHaveLength(10);
      for (const record of stored) expect(record.producerId).toBeGreaterThanOrEqual(0n);

      // Without it (idempotent: false), the batches carry no producer id (-1).
      const plain = publisher({ idempotent: false });
      expect((await plain.publish([message(topic, 'plain')], never))[0]).toEqual({ ok: true });
      const again = await readTopic(topic, 11);
      expect(again.find((r) => r.aggregateId === 'plain')?.producerId).toBe(-1n);
    });

    it('publishes a batch of 5,000 in one call', async () => {
      const topic = uniqueTopic('big');
      await createTopic(topic, 3);
      const pub = publisher();
      const pad = 'x'.repeat(300);
      const batch = Array.from({ length: 5_000 }, (_, i) =>
        message(topic, `b${i}`, 1, { payload: Buffer.from(JSON.stringify({ i, pad })) }),
      );
      const started = performance.now();
      const outcomes = await pub.publish(batch, never);
      const ms = performance.now() - started;
      expect(outcomes.filter((o) => !o.ok)).toEqual([]);
      const stored = await readTopic(topic, 5_000, 30_000);
      expect(stored).toHaveLength(5_000);
      expect(new Set(stored.map((r) => r.eventId))).toEqual(new Set(batch.map((m) => m.eventId)));
      console.info(`kafka: 5,000 messages published in ${ms.toFixed(0)} ms`);
    }, 60_000);

    it('a partly refused request loses nothing afterwards (new producer id after a failure)', async () => {
      // @platformatic/kafka 1.x does not advance its sequence numbers for the partitions that
      // succeeded in a request that failed elsewhere: without a new producer id the broker would
      // take the next batches for those partitions as duplicates and drop them.
      const topic = uniqueTopic('partial');
      await createTopic(topic, 3);
      const pub = publisher({ maxMessageBytes: 8 * MiB });
      const keys = Array.from({ length: 50 }, (_, i) => `p${i}`);
      const poisonKey = keys.find((k) => partitionFor(Buffer.from(k), 3) === 0)!;
      const others = keys.filter((k) => partitionFor(Buffer.from(k), 3) !== 0).slice(0, 6);
      const first = [
        ...others.map((k) => message(topic, k, 1)),
        message(topic, poisonKey, 1, { payload: Buffer.alloc(2 * MiB, 1) }),
      ];
      const outcomes = await pub.publish(first, never);
      expect(outcomes.slice(0, 6)).toEqual(others.map(() => ({ ok: true })));
      expect(outcomes[6]).toMatchObject({ ok: false, retryable: false });
      expect(failure(outcomes[6]).message).toMatch(/MESSAGE_TOO_LARGE/);

      const second = others.map((k) => message(topic, k, 2));
      expect(await pub.publish(second, never)).toEqual(second.map(() => ({ ok: true })));
      const stored = await readTopic(topic, 12);
      expect(stored.map((r) => r.eventId).sort()).toEqual(
        [...first.slice(0, 6), ...second].map((m) => m.eventId).sort(),
      );
    });

    it('a message over maxMessageBytes fails permanently before sending; the rest is delivered', async () => {
      const topic = uniqueTopic('large');
      await createTopic(topic, 1);
      const pub = publisher();
      const batch = [
        message(topic, 'l1'),
        message(topic, 'l2', 1, { payload: Buffer.alloc(MiB + 1) }),
        message(topic, 'l3'),
      ];
      const outcomes = await pub.publish(batch, never);
      expect(outcomes[0]).toEqual({ ok: true });
      expect(outcomes[2]).toEqual({ ok: true });
      expect(outcomes[1]).toMatchObject({ ok: false, retryable: false });
      expect(failure(outcomes[1]).message).toMatch(/maxMessageBytes/);
      expect((await readTopic(topic, 2)).map((r) => r.aggregateId)).toEqual(['l1', 'l3']);
    });

    it('splits a batch whose records exceed maxMessageBytes in one partition into several requests', async () => {
      const topic = uniqueTopic('split');
      await createTopic(topic, 1);
      const pub = publisher();
      // 12 x 200 KB in one partition: 2.4 MB, over the broker's 1 MiB per record batch.
      const batch = Array.from({ length: 12 }, (_, i) =>
        message(topic, `s${i}`, 1, { payload: Buffer.alloc(200_000, 65 + i) }),
      );
      expect(await pub.publish(batch, never)).toEqual(batch.map(() => ({ ok: true })));
      const stored = await readTopic(topic, 12);
      expect(stored.map((r) => r.aggregateId)).toEqual(batch.map((m) => m.aggregateId));
    });

    it('a topic whose max.message.bytes is below maxMessageBytes: batches are halved, order kept, only the oversize message fails', async () => {
      const topic = uniqueTopic('halve');
      await admin.createTopics({
        topics: [topic],
        partitions: 1,
        replicas: 1,
        configs: [{ name: 'max.message.bytes', value: '100000' }],
      });
      const pub = publisher();
      // 11 records of 30 KB in one partition (330 KB), and one of 150 KB that can never fit.
      const batch = Array.from({ length: 12 }, (_, i) =>
        message(topic, `h${i}`, 1, { payload: Buffer.alloc(i === 7 ? 150_000 : 30_000, 97 + i) }),
      );
      const outcomes = await pub.publish(batch, never);
      outcomes.forEach((outcome, i) => {
        if (i === 7) expect(outcome).toMatchObject({ ok: false, retryable: false });
        else expect(outcome).toEqual({ ok: true });
      });
      expect(failure(outcomes[7]).message).toMatch(/MESSAGE_TOO_LARGE|RECORD_LIST_TOO_LARGE/);
      const stored = await readTopic(topic, 11);
      expect(stored.map((r) => r.aggregateId)).toEqual(
        batch.filter((_, i) => i !== 7).map((m) => m.aggregateId),
      );
    });

    it('invalid topic names fail permanently before sending', async () => {
      const topic = uniqueTopic('valid');
      await createTopic(topic, 1);
      const pub = publisher();
      // Topics Kafka refuses, most of which enqueue takes (other brokers carry them): each says the rule.
      const batch = [
        message('orders/created', 'v1'),
        message('x'.repeat(250), 'v2'),
        message('..', 'v3'),
        message('', 'v4', 1, { aggregateType: 'order', type: 'créé' }),
        message('urn:orders', 'v5'),
        message(topic, 'v6'),
      ];
      const outcomes = await pub.publish(batch, never);
      const rules = [
        /"orders\/created" .*: it has characters other than ASCII letters, digits, "\.", "_" and "-" \("\/" U\+002F at index 6\)/,
        /: it is 250 characters long; Kafka allows at most 249\./,
        /"\.\." .*: it is "\." or "\.\."\./,
        /"order\.créé" .*: it has characters other than .* \("é" U\+00E9 at index 8\)/,
        /"urn:orders" .*: it has characters other than .* \(":" U\+003A at index 3\)/,
      ];
      rules.forEach((rule, i) => {
        expect(outcomes[i]).toMatchObject({ ok: false, retryable: false });
        expect(failure(outcomes[i]).message).toMatch(/^Kafka rejects topic /);
        expect(failure(outcomes[i]).message).toMatch(rule);
        expect(failure(outcomes[i]).message).toMatch(/the `destination` option$/);
      });
      expect(outcomes[5]).toEqual({ ok: true });
      expect(topicProblem('orders.created_v2-EU')).toBeUndefined();
      expect(topicProblem('a'.repeat(249))).toBeUndefined();
      expect(topicProblem('a'.repeat(250))).toMatch(/249/);
      expect(
        defaultTopic(message('', 'x', 1, { topic: null, aggregateType: 'order', type: 'shipped' })),
      ).toBe('order.shipped');
    });

    it('a missing topic is retryable (not a broker outage) unless createTopics creates it', async () => {
      const topic = uniqueTopic('missing');
      const strict = publisher();
      const [outcome] = await strict.publish([message(topic, 'm1')], never);
      expect(outcome).toMatchObject({ ok: false, retryable: true });
      expect(isBrokerUnavailable(failure(outcome))).toBe(false);
      expect(failure(outcome).message).toMatch(/does not exist/);

      const creating = publisher({ createTopics: { partitions: 2 } });
      expect(await creating.publish([message(topic, 'm2')], never)).toEqual([{ ok: true }]);
      const metadata = await reader.metadata({ topics: [topic], forceUpdate: true });
      expect(metadata.topics.get(topic)?.partitionsCount).toBe(2);
      // The first publisher sees the topic now.
      expect(await strict.publish([message(topic, 'm3')], never)).toEqual([{ ok: true }]);
    });

    it('unreachable brokers: retryable with BROKER_UNAVAILABLE, quickly', async () => {
      const pub = publisher({ url: ['127.0.0.1:1'], timeoutMs: 3_000 });
      const started = Date.now();
      const outcomes = await pub.publish(
        [message('txo-kafka-nowhere', 'u1'), message('bad/topic', 'u2')],
        never,
      );
      expect(Date.now() - started).toBeLessThan(3_500);
      expect(outcomes[0]).toMatchObject({ ok: false, retryable: true });
      expect(isBrokerUnavailable(failure(outcomes[0]))).toBe(true);
      expect(outcomes[1]).toMatchObject({ ok: false, retryable: false });
    });

    it('a stalled link (socket open, nothing answered): BROKER_UNAVAILABLE, not an attempt; it goes on after', async () => {
      const topic = uniqueTopic('stall');
      await createTopic(topic, 1);
      const proxy = await TcpProxy.start({ host: KAFKA_HOST, port: KAFKA_PORT }, { hangUp: 'reset' });
      try {
        const address = { host: '127.0.0.1', port: proxy.port };
        const pub = publisher({
          url: [`${address.host}:${address.port}`],
          mapBrokerAddress: () => address,
          timeoutMs: 1_000,
        });
        expect(await pub.publish([message(topic, 's1')], never)).toEqual([{ ok: true }]);
        proxy.stall();
        const outcomes = await pub.publish([message(topic, 's2'), message(topic, 's3')], never);
        for (const outcome of outcomes) {
          const error = failure(outcome);
          expect(error.retryable).toBe(true);
          expect(isBrokerUnavailable(error)).toBe(true);
        }
        await proxy.resume();
        let after: PublishOutcome[] = [];
        for (let i = 0; i < 20; i++) {
          after = await pub.publish([message(topic, 's2'), message(topic, 's3')], never);
          if (after.every((o) => o.ok)) break;
          await sleep(250);
        }
        expect(after).toEqual([{ ok: true }, { ok: true }]);
      } finally {
        await proxy.close();
      }
    });

    it('works with an existing producer, which it does not close', async () => {
      const topic = uniqueTopic('given');
      await createTopic(topic, 1);
      const producer = new Producer({
        clientId: 'txo-kafka-given',
        bootstrapBrokers: [BROKER],
        idempotent: true,
      });
      try {
        const pub = kafkaPublisher({ client: producer });
        expect(await pub.publish([message(topic, 'g1')], never)).toEqual([{ ok: true }]);
        await pub.close();
        expect(producer.closed).toBe(false);
        await expect(pub.publish([message(topic, 'g2')], never)).rejects.toMatchObject({
          code: 'TXO_PUBLISHER_CLOSED',
        });
        await expect(pub.publish([message(topic, 'g2')], never)).rejects.toBeInstanceOf(OutboxError);
      } finally {
        await producer.close();
      }
    });

    it('the old option spellings (brokers, producer, topic) still work, each with one DeprecationWarning', async () => {
      const topic = uniqueTopic('old-names');
      await createTopic(topic, 1);
      const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
      const producer = new Producer({
        clientId: 'txo-kafka-old',
        bootstrapBrokers: [BROKER],
        idempotent: true,
      });
      try {
        const byBrokers = kafkaPublisher({ brokers: [BROKER], topic: () => topic });
        publishers.push(byBrokers);
        const byProducer = kafkaPublisher({ producer, topic: () => topic });
        expect(await byBrokers.publish([message('ignored', 'o1')], never)).toEqual([{ ok: true }]);
        expect(await byProducer.publish([message('ignored', 'o2')], never)).toEqual([{ ok: true }]);
        await byProducer.close();
        expect(producer.closed).toBe(false);
        expect((await readTopic(topic, 2)).map((r) => r.aggregateId)).toEqual(['o1', 'o2']);
        const warned = warn.mock.calls.map((call) => String(call[0]));
        expect(warned.filter((w) => /`brokers` is deprecated, use `url`/.test(w))).toHaveLength(1);
        expect(warned.filter((w) => /`producer` is deprecated, use `client`/.test(w))).toHaveLength(1);
        expect(warned.filter((w) => /`topic` is deprecated, use `destination`/.test(w))).toHaveLength(1);
      } finally {
        warn.mockRestore();
        await producer.close();
      }
    });

    it('validates its options', () => {
      expect(() => kafkaPublisher({})).toThrow(OutboxValidationError);
      expect(() => kafkaPublisher({ url: [] })).toThrow(/url/);
      expect(() => kafkaPublisher({ url: ['localhost'] })).toThrow(/host:port/);
      expect(() => kafkaPublisher({ url: [BROKER], timeoutMs: 0 })).toThrow(/timeoutMs/);
      expect(() => kafkaPublisher({ url: [BROKER], maxMessageBytes: 1.5 })).toThrow(/maxMessageBytes/);
      expect(() => kafkaPublisher({ url: [BROKER], createTopics: { partitions: 0 } })).toThrow(/partitions/);
    });
  });
});
