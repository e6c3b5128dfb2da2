/**
 * The partition counts of the topics a publisher sends to, and `createTopics`: a missing topic
 * created at first use with the publisher's own admin client.
 */
import type { Admin } from '@platformatic/kafka';
import { PublishError } from '../../errors.js';
import { sleep } from '../../sleep.js';
import { failed, type PublishOutcome } from '../contract.js';
import { classify, isUnknownTopic, protocolCodes, TOPIC_ALREADY_EXISTS } from './classify.js';
import { createAdmin } from './clients.js';
import type { KafkaProducer, KafkaSettings, KafkaTopicDefaults } from './options.js';

export class KafkaTopics {
  readonly #settings: KafkaSettings;
  readonly #producer: KafkaProducer;
  #admin: Admin | undefined;
  /** Topics this publisher created (with createTopics). */
  readonly #created = new Set<string>();

  constructor(settings: KafkaSettings, producer: KafkaProducer) {
    this.#settings = settings;
    this.#producer = producer;
  }

  /** The partition count of a topic (creating it when asked to), or the outcome of its messages. */
  async partitions(topic: string): Promise<number | PublishOutcome> {
    try {
      return await this.#partitionCount(topic, false);
    } catch (error) {
      if (!isUnknownTopic(error)) {
        const verdict = classify(error, `topic "${topic}"`);
        return failed(verdict, verdict.retryable);
      }
      if (this.#settings.createTopics === false) {
        return failed(
          new PublishError(
            `Kafka topic "${topic}" does not exist: create it, or set createTopics (tests, development)`,
            { retryable: true, cause: error },
          ),
          true,
        );
      }
    }
    try {
      await this.#create(topic, this.#settings.createTopics);
      return await this.#partitionCount(topic, true);
    } catch (error) {
      const verdict = classify(error, `topic "${topic}"`);
      return failed(verdict, verdict.retryable);
    }
  }

  /** Closes the admin client, if one was made. */
  async close(): Promise<void> {
    const admin = this.#admin;
    if (admin !== undefined) await new Promise<void>((resolve) => admin.close(() => resolve()));
  }

  /** The partition count of an existing topic; with `waitForLeaders`, once every partition has a leader. */
  async #partitionCount(topic: string, waitForLeaders: boolean): Promise<number> {
    const started = Date.now();
    for (;;) {
      const metadata = await this.#producer.metadata({ topics: [topic], forceUpdate: waitForLeaders });
      const info = metadata.topics.get(topic);
      if (info === undefined) throw new Error(`Unknown topic ${topic}.`);
      let leaders = 0;
      for (let p = 0; p < info.partitionsCount; p++) if ((info.partitions[p]?.leader ?? -1) >= 0) leaders++;
      if (info.partitionsCount > 0 && leaders === info.partitionsCount) return info.partitionsCount;
      if (Date.now() - started > this.#settings.timeoutMs) {
        throw new PublishError(`Kafka topic "${topic}" has partitions without a leader`, { retryable: true });
      }
      waitForLeaders = true;
      await sleep(100);
    }
  }

  async #create(topic: string, defaults: KafkaTopicDefaults): Promise<void> {
    if (this.#created.has(topic)) return;
    this.#admin ??= createAdmin(this.#settings);
    try {
      await this.#admin.createTopics({
        topics: [topic],
        ...(defaults.partitions === undefined ? {} : { partitions: defaults.partitions }),
        ...(defaults.replicationFactor === undefined ? {} : { replicas: defaults.replicationFactor }),
      });
    } catch (error) {
      if (protocolCodes(error).includes(TOPIC_ALREADY_EXISTS)) return;
      throw error;
    }
    this.#created.add(topic);
  }
}
