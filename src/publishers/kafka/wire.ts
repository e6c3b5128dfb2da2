/**
 * A message on the wire: its topic checked, the aggregate id as the record key, the payload
 * bytes as the value (untouched), the CloudEvents envelope in the record headers as the Kafka
 * binding (§3.2, binary content mode) says: `ce_<attribute>` headers with the values as UTF-8,
 * the data content type in a `content-type` header, the user's own headers first, verbatim.
 */
import type { MessageToProduce } from '@platformatic/kafka';
import { envelopeHeaders } from '../../envelope/bindings.js';
import { errorMessage } from '../../errors.js';
import type { OutboxMessage, PublishOutcome } from '../contract.js';
import { asBuffer } from '../core/bytes.js';
import { permanent } from '../core/outcomes.js';
import { topicProblem } from './names.js';

/** Record batch header (v2) in front of a partition's records. */
export const BATCH_OVERHEAD = 61;

/** A message ready to send: topic checked, key, value and headers encoded. */
export interface Item {
  /** Position in the batch. */
  readonly index: number;
  readonly topic: string;
  readonly key: Buffer;
  readonly value: Buffer;
  readonly headers: Map<Buffer, Buffer>;
  /** Upper bound of the encoded record's size. */
  readonly bytes: number;
  /** Set once the topic's partition count is known (-1 until then). */
  partition: number;
}

/** What {@link prepare} needs of the settings. */
export interface WireSettings {
  readonly destination: (message: OutboxMessage) => string;
  readonly source: string;
  readonly maxMessageBytes: number;
}

/** Topic, key, value and headers of a message, or its permanent outcome. */
export function prepare(
  message: OutboxMessage,
  index: number,
  settings: WireSettings,
): Item | PublishOutcome {
  let topic: string;
  try {
    topic = settings.destination(message);
  } catch (error) {
    return permanent(`The topic function threw for event ${message.eventId}: ${errorMessage(error)}`, error);
  }
  const problem = typeof topic === 'string' ? topicProblem(topic) : 'is not a string';
  if (problem !== undefined) {
    // enqueue takes any topic (other brokers allow more): say how to get one Kafka accepts.
    return permanent(
      `Kafka rejects topic ${JSON.stringify(topic).slice(0, 300)} (event ${message.eventId}): it ${problem}. ` +
        'Enqueue it with a valid topic, or map topics to valid names with the `destination` option',
    );
  }
  const key = Buffer.from(message.aggregateId);
  const value = asBuffer(message.payload);
  const headers = new Map<Buffer, Buffer>();
  let bytes = 36 + key.length + value.length;
  const envelope = envelopeHeaders(message, settings.source, 'kafka');
  for (const name in envelope) {
    const nameBytes = headerName(name);
    const valueBytes = Buffer.from(envelope[name]!);
    headers.set(nameBytes, valueBytes);
    bytes += 10 + nameBytes.length + valueBytes.length;
  }
  if (bytes + BATCH_OVERHEAD > settings.maxMessageBytes) {
    return permanent(
      `Message of about ${bytes} bytes for topic "${topic}" (event ${message.eventId}) exceeds ` +
        `maxMessageBytes (${settings.maxMessageBytes}); raise it together with the topic's max.message.bytes`,
    );
  }
  return { index, topic, key, value, headers, bytes, partition: -1 };
}

/** The records of one produce request, each to its item's partition. */
export function records(items: readonly Item[]): MessageToProduce<Buffer, Buffer, Buffer, Buffer>[] {
  return items.map((item) => ({
    topic: item.topic,
    partition: item.partition,
    key: item.key,
    value: item.value,
    headers: item.headers,
  }));
}

/** `topic:partition` of an item, the key of the per-partition maps. */
export function partitionKey(item: Item): string {
  return `${item.topic}:${item.partition}`;
}

/** Header names repeat (ce_*, content-type, user headers): one Buffer each, at most 1,024 kept. */
const headerNames = new Map<string, Buffer>();

export function headerName(name: string): Buffer {
  let bytes = headerNames.get(name);
  if (bytes === undefined) {
    bytes = Buffer.from(name);
    if (headerNames.size >= 1024) headerNames.clear();
    headerNames.set(name, bytes);
  }
  return bytes;
}
