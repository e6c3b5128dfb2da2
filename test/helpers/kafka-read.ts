/**
 * Reads back what a Kafka topic holds, with each record's partition, offset and the producer id
 * of its batch: for the Kafka publisher's integration and contract tests. The envelope is read
 * from the Kafka binding's `ce_` headers only, so a record without them reads as no event.
 */
import { randomUUID } from 'node:crypto';
import { Admin, Consumer } from '@platformatic/kafka';
import { Kafka, type KafkaMessage } from 'cloudevents';
import type { ReceivedMessage } from '../../src/testing/index.js';
import { KAFKA_BROKER } from './kafka.js';

const MiB = 1024 * 1024;
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** An admin client (topics) and a consumer of its own group (reads) on the test broker; close both. */
export function kafkaReader(clientId: string): { admin: Admin; reader: Consumer } {
  return {
    admin: new Admin({ clientId, bootstrapBrokers: [KAFKA_BROKER] }),
    reader: new Consumer({ clientId, groupId: `txo-read-${randomUUID()}`, bootstrapBrokers: [KAFKA_BROKER] }),
  };
}

/** A record as stored, with its partition and the producer id of its batch. */
export interface Stored extends ReceivedMessage {
  readonly partition: number;
  readonly offset: bigint;
  readonly producerId: bigint;
  readonly key: string;
  /** The record's timestamp, ms since the epoch. */
  readonly timestamp: bigint;
}

/** Reads everything the topic holds (each partition from its start, in offset order), once `expected` arrived. */
export async function readTopic(
  reader: Consumer,
  topic: string,
  expected: number,
  timeoutMs = 15_000,
): Promise<Stored[]> {
  const deadline = Date.now() + timeoutMs;
  let ends: bigint[] = [];
  for (;;) {
    ends = (await reader.listOffsets({ topics: [topic] })).get(topic) ?? [];
    const total = ends.reduce((sum, end) => sum + Number(end), 0);
    if (total >= expected || Date.now() > deadline) break;
    await sleep(100);
  }
  const metadata = await reader.metadata({ topics: [topic], forceUpdate: true });
  const info = metadata.topics.get(topic)!;
  const stored: Stored[] = [];
  const readBy = Date.now() + timeoutMs;
  for (let partition = 0; partition < ends.length; partition++) {
    let offset = 0n;
    while (offset < ends[partition]! && Date.now() < readBy) {
      const response = await reader.fetch({
        node: info.partitions[partition]!.leader,
        topics: [
          {
            topicId: info.id,
            partitions: [
              {
                partition,
                fetchOffset: offset,
                currentLeaderEpoch: -1,
                lastFetchedEpoch: -1,
                partitionMaxBytes: 16 * MiB,
              },
            ],
          },
        ],
        maxWaitTime: 100,
        minBytes: 1,
        maxBytes: 16 * MiB,
      });
      for (const batch of response.responses[0]?.partitions[0]?.records ?? []) {
        for (const record of batch.records) {
          const at = batch.firstOffset + BigInt(record.offsetDelta);
          if (at < offset) continue;
          const headers: Record<string, string> = {};
          for (const [name, value] of record.headers) headers[String(name)] = String(value ?? '');
          stored.push({
            eventId: headers['ce_id'] ?? '',
            aggregateId: headers['ce_aggregateid'] ?? '',
            sequence: Number(headers['ce_aggregatesequence']),
            headers,
            payload: record.value ?? Buffer.alloc(0),
            key: String(record.key ?? ''),
            timestamp: batch.firstTimestamp + record.timestampDelta,
            partition,
            offset: at,
            producerId: batch.producerId,
          });
          offset = at + 1n;
        }
      }
    }
  }
  return stored;
}

/**
 * The record as the official CloudEvents SDK reads it (`Kafka.toEvent`, binary mode), as plain
 * attributes without the data; throws what the SDK throws.
 */
export function cloudEventOf(stored: Stored): Record<string, unknown> {
  const value = Buffer.from(stored.payload);
  // `body` is the generic Message's field; the Kafka binding reads `value`.
  const message: KafkaMessage<Buffer> = {
    key: stored.key,
    value,
    headers: { ...stored.headers },
    timestamp: String(stored.timestamp),
    body: value,
  };
  const event = Kafka.toEvent(message);
  if (Array.isArray(event)) throw new Error(`record ${stored.offset} is a batch of ${event.length} events`);
  const { data: _data, data_base64: _base64, ...attributes } = event;
  return attributes;
}

/** `stored` with the SDK's reading of it, for the publisher contract's `cloudEvents` checks. */
export function withCloudEvent(stored: Stored): Stored & { readonly cloudEvent: Record<string, unknown> } {
  return { ...stored, cloudEvent: cloudEventOf(stored) };
}
