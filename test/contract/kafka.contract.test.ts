/**
 * The publisher contract (src/testing/publisher-contract.ts) on the Kafka publisher, against a
 * real broker on 127.0.0.1:9092 (`bash scripts/kafka.sh start`; CI starts it). Without a broker
 * there, the whole file is skipped with a message. Every record read back also goes through the
 * official CloudEvents SDK's Kafka binding (`Kafka.toEvent`).
 */
import { randomBytes } from 'node:crypto';
import type { Admin, Consumer } from '@platformatic/kafka';
import { CloudEvent } from 'cloudevents';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Publisher } from '../../src/publishers/contract.js';
import { kafkaPublisher } from '../../src/publishers/kafka/index.js';
import { AWKWARD_IDS, contractMessage, publisherContract } from '../../src/testing/index.js';
import { KAFKA_BROKER, KAFKA_HOST, KAFKA_PORT, kafkaAvailable } from '../helpers/kafka.js';
import { kafkaReader, readTopic, withCloudEvent } from '../helpers/kafka-read.js';

const MiB = 1024 * 1024;
const kafkaUp = await kafkaAvailable('kafka.contract.test.ts:');
const topicOf = (namespace: string): string => `txo-contract.${namespace}`;

let admin: Admin;
let reader: Consumer;
const publishers: Publisher[] = [];

describe.skipIf(!kafkaUp)(`Kafka on ${KAFKA_BROKER}`, () => {
  beforeAll(() => {
    ({ admin, reader } = kafkaReader('txo-kafka-contract'));
  });

  afterAll(async () => {
    await Promise.allSettled(publishers.map((p) => p.close()));
    await reader?.close();
    await admin?.close();
  }, 60_000);

  publisherContract(
    { describe, it, expect, beforeAll, afterAll },
    {
      name: 'kafka',
      features: { orderedPerKey: true, brokerDedup: false, persistent: true },
      broker: { host: KAFKA_HOST, port: KAFKA_PORT },
      create: (address, namespace, options) => {
        const created = kafkaPublisher({
          url: [`${address.host}:${address.port}`],
          ...(options?.ceSource === undefined ? {} : { ceSource: options.ceSource }),
          clientId: `txo-contract-${namespace}`,
          createTopics: { partitions: 3 },
          // Kafka advertises 127.0.0.1:9092 in metadata: dial the suite's proxy instead, so that
          // cutting the proxy cuts every connection of the publisher.
          mapBrokerAddress: () => address,
          // Above the broker's message.max.bytes (1 MiB): the broker itself refuses the poison.
          maxMessageBytes: 8 * MiB,
          timeoutMs: 5_000,
        });
        publishers.push(created);
        return created;
      },
      topic: topicOf,
      read: async (namespace, expected) =>
        (await readTopic(reader, topicOf(namespace), expected)).map(withCloudEvent),
      cloudEvents: true,
      poison: (_namespace, m) => ({ ...m, payload: Buffer.alloc(2 * MiB, 120) }),
      cleanup: (namespace) => admin.deleteTopics({ topics: [topicOf(namespace)] }).catch(() => undefined),
    },
  );

  it("the SDK's partitionkey is the aggregate id (the record key), and each event passes its strict checks", async () => {
    const topic = topicOf(`pk${randomBytes(4).toString('hex')}`);
    const publisher = kafkaPublisher({
      url: [KAFKA_BROKER],
      clientId: 'txo-contract-pk',
      createTopics: { partitions: 3 },
      ceSource: 'urn:tx-outbox:contract',
    });
    publishers.push(publisher);
    try {
      const batch = AWKWARD_IDS.map((id, i) => contractMessage(topic, id, i + 1));
      const outcomes = await publisher.publish(batch, new AbortController().signal);
      expect(outcomes.every((o) => o.ok)).toBe(true);
      const got = (await readTopic(reader, topic, batch.length)).map(withCloudEvent);
      expect(got).toHaveLength(batch.length);
      for (const sent of batch) {
        const r = got.find((m) => m.eventId === sent.eventId)!;
        expect(r.key).toBe(sent.aggregateId);
        expect(r.cloudEvent['partitionkey']).toBe(sent.aggregateId);
        expect(r.cloudEvent['subject']).toBe(sent.aggregateId);
        // Kafka.toEvent does not validate; the strict constructor checks names, source and time.
        expect(
          () =>
            new CloudEvent({ ...r.cloudEvent, data: JSON.parse(Buffer.from(r.payload).toString()) }, true),
        ).not.toThrow();
      }
    } finally {
      await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
    }
  });
});
