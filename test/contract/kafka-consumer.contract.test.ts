import { Admin, Producer } from '@platformatic/kafka';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeKafka } from '../../src/consumers/kafka/index.js';
import type { Publisher } from '../../src/publishers/contract.js';
import { kafkaPublisher } from '../../src/publishers/kafka/index.js';
import { consumerContract } from '../../src/testing/index.js';
import { DATABASE_URL } from '../helpers/env.js';
import { committedToEnd, KAFKA_BROKER, kafkaAvailable } from '../helpers/kafka.js';
import { publishAll } from '../helpers/messages.js';

const PARTITIONS = 3;
const kafkaUp = await kafkaAvailable('kafka-consumer.contract.test.ts:');
let admin: Admin;
let publisher: Publisher;
let raw: Producer<Buffer, Buffer, Buffer, Buffer>;

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
      publish: (_ns, messages) => publishAll(publisher, messages),
      async publishForeign(ns) {
        await raw.send({ messages: [{ topic: ns, key: Buffer.from('f'), value: Buffer.from('{}') }] });
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
          ...(setup.signal ? { signal: setup.signal } : {}),
        }),
      settled: (ns) => committedToEnd(admin, ns, PARTITIONS),
      async cleanup(ns) {
        await admin.deleteTopics({ topics: [ns] });
      },
    },
  );
});
