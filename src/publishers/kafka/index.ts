/**
 * Apache Kafka publisher, on @platformatic/kafka (pure JavaScript, no native addon):
 * `tx-outbox/kafka`.
 *
 * Every message is keyed by its aggregate id, so one aggregate's events share a partition and
 * stay in order; the partition is chosen as the Java client's default partitioner does
 * (murmur2 of the key), so this publisher and any Java, Kafka Connect or librdkafka producer
 * (`murmur2_random`) put an aggregate in the same partition. The CloudEvents envelope travels
 * in the record headers, the payload bytes are the record value, untouched.
 *
 * A publish sends the whole batch in as few produce requests as the broker allows (one record
 * batch per partition, each at most `maxMessageBytes`), grouped per leader by the client, with
 * `acks=all` and, by default, the idempotent producer.
 *
 * The folder, a file per role: options.ts (the options, resolved once), names.ts (topic name
 * rule), wire.ts (records and headers), partitioner.ts (murmur2), requests.ts (produce requests),
 * classify.ts and verdicts.ts (error verdicts), addresses.ts and clients.ts (the clients),
 * topics.ts (partition counts, createTopics), publisher.ts (the class).
 */
import type { Publisher } from '../contract.js';
import { type KafkaPublisherOptions, resolveKafkaOptions } from './options.js';
import { KafkaPublisher } from './publisher.js';

export { defaultTopic, topicProblem } from './names.js';
export type {
  KafkaAddress,
  KafkaClientOptions,
  KafkaProducer,
  KafkaPublisherOptions,
  KafkaTopicDefaults,
} from './options.js';
export { murmur2, partitionFor } from './partitioner.js';

/**
 * A {@link Publisher} for Apache Kafka. The producer connects lazily at the first publish and
 * reconnects on its own; while the brokers cannot be reached, publishes fail as retryable with
 * code `TXO_BROKER_UNAVAILABLE` (within `timeoutMs`), and work again once they are back.
 *
 * Outcomes, per message: an invalid topic name, a message over `maxMessageBytes`, and the
 * broker's refusals that a retry cannot cure (message too large, invalid topic, authorization,
 * policy) fail permanently; a missing topic (without `createTopics`), leader changes, timeouts
 * and unreachable brokers are retryable. Messages of the partitions the broker acknowledged are
 * delivered even when others of the same batch failed.
 *
 * Batches are sent one at a time (the idempotent producer's sequence numbers need it), and after
 * any failed send the idempotent producer takes a new producer id before the next one, so that a
 * partly failed request can never make the broker drop later batches as duplicates.
 *
 * `close()` is idempotent: it waits for the batches in flight (each settles within about
 * `timeoutMs`), then closes the producer it created; later publishes reject with an OutboxError
 * `TXO_PUBLISHER_CLOSED`.
 *
 * Old option spellings (`brokers`, `producer`, `topic`) still work, with one DeprecationWarning
 * each: use `url`, `client`, `destination`.
 *
 * @example
 * const publisher = kafkaPublisher({ url: ['127.0.0.1:9092'], clientId: 'orders-relay' });
 */
export function kafkaPublisher(options: KafkaPublisherOptions): Publisher {
  return new KafkaPublisher(resolveKafkaOptions(options));
}
