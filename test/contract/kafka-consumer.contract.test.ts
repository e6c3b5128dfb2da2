/**
 * The consumer contract (src/testing/consumer-contract.ts) on consumeKafka, against a real broker
 * on 127.0.0.1:9092 and PostgreSQL. Events go out through the Kafka publisher (the Kafka
 * binding's `ce_` headers) or, as a relay still on tx-outbox 0.1 would send them, with `ce-*`
 * headers holding the values as they are.
 */
import { Admin, type MessageToProduce, Producer } from '@platformatic/kafka';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeKafka } from '../../src/consumers/kafka/index.js';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';
import { kafkaPublisher, partitionFor } from '../../src/publishers/kafka/index.js';
import { consumerContract, previousEnvelopeHeaders } from '../../src/testing/index.js';
import { DATABASE_URL } from '../helpers/env.js';
import { committedToEnd, KAFKA_BROKER, kafkaAvailable } from '../helpers/kafka.js';
import { publishAll } from '../helpers/messages.js';

const PARTITIONS = 3;
const kafkaUp = await kafkaAvailable('kafka-consumer.contract.test.ts:');
let admin: Admin;
let publisher: Publisher;
let raw: Producer<Buffer, Buffer, Buffer, Buffer>;

/** A record as tx-outbox 0.1's Kafka publisher wrote it: keyed and partitioned (murmur2) by aggregate id. */
function previousRecord(topic: string, m: OutboxMessage): MessageToProduce<Buffer, Buffer, Buffer, Buffer> {
  const key = Buffer.from(m.aggregateId);
  const headers = new Map<Buffer, Buffer>();
  const envelope = previousEnvelopeHeaders(m, 'contract');
  for (const name in envelope) headers.set(Buffer.from(name), Buffer.from(envelope[name]!));
  return {
    topic,
    partition: partitionFor(key, PARTITIONS),
    key,
    value: Buffer.from(m.payload),
    headers,
  };
}

describe.skipIf(!kafkaUp)(`Kafka on ${KAFKA_BROKER}`, () => {
  beforeAll(async () => {
    admin = new Admin({ clientId: 'txo-kcc', bootstrapBrokers: [KAFKA_BROKER] });
    publisher = kafkaPublisher({
      url: [KAFKA_BROKER],
      clientId: 'txo-kcc',
      destination: (m) => m.topic ?? '',
    });
    raw = new Producer({ clientId: 'txo-kcc-raw', bootstrapBrokers: [KAFKA_BROKER] });
  });
  afterAll(async () => {
    await publisher?.close();
    await raw?.close();
    await admin?.close();
  });

  consumerContract(
    { describe, it, expect, beforeAll, afterAll },
    {
      name: 'kafka',
      databaseUrl: DATABASE_URL,
      timeoutMs: 30_000,
      prepare: async (ns) => {
        await admin.createTopics({ topics: [ns], partitions: PARTITIONS, replicas: 1 });
      },
      publish: async (ns, messages, options) => {
        if (!options?.previous) return publishAll(publisher, messages);
        await raw.send({ messages: messages.map((m) => previousRecord(ns, m)) });
      },
      async publishForeign(ns) {
        await raw.send({ messages: [{ topic: ns, key: Buffer.from('f'), value: Buffer.from('{}') }] });
      },
      envelope: {
        binding: 'kafka',
        async publish(ns, m, pairs) {
          // Record headers are a list: a name may come twice (two keys of the map).
          const headers = new Map<Buffer, Buffer>();
          for (const [name, value] of pairs) headers.set(Buffer.from(name), Buffer.from(value));
          const key = Buffer.from(m.aggregateId);
          await raw.send({
            messages: [
              {
                topic: ns,
                partition: partitionFor(key, PARTITIONS),
                key,
                value: Buffer.from(m.payload),
                headers,
              },
            ],
          });
        },
      },
      consume: (ns, setup) =>
        consumeKafka({
          inbox: setup.inbox,
          handler: setup.handler,
          url: [KAFKA_BROKER],
          topic: ns,
          group: ns,
          clientId: `txo-kcc-${setup.instance}`,
          concurrency: setup.concurrency,
          deferMs: setup.deferMs,
          logger: setup.logger,
          ...(setup.signal ? { signal: setup.signal } : {}),
        }),
      settled: (ns) => committedToEnd(admin, ns, PARTITIONS),
      async cleanup(ns) {
        await admin.deleteTopics({ topics: [ns] });
      },
    },
  );
});
