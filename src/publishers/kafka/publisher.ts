/**
 * The Kafka publisher: prepares a publish's messages (wire.ts), runs its send job after the
 * earlier ones (one at a time, for the idempotent producer's sequence numbers) and returns the
 * outcomes known when the job ends or the publish gives up (CallAbort: the caller's signal and
 * `timeoutMs`).
 */
import { ProduceAcks } from '@platformatic/kafka';
import { BROKER_UNAVAILABLE, PublishError } from '../../errors.js';
import { DELIVERED, failed, type OutboxMessage, type Publisher, type PublishOutcome } from '../contract.js';
import { isOutcome } from '../core/batch-run.js';
import { CallAbort } from '../core/call-abort.js';
import { PublisherLifecycle } from '../core/lifecycle.js';
import { classify, gaveUp, unexpected } from './classify.js';
import { createProducer } from './clients.js';
import type { KafkaProducer, KafkaSettings } from './options.js';
import { partitionFor } from './partitioner.js';
import { chunk, groupBy } from './requests.js';
import { KafkaTopics } from './topics.js';
import { settleFailedSend } from './verdicts.js';
import { type Item, prepare, records } from './wire.js';

/** What one publish shares with its send job: the outcomes so far, and whether to stop. */
interface Job {
  readonly items: readonly Item[];
  readonly outcomes: Map<number, PublishOutcome>;
  /** Set when the publish gave up (deadline or abort): the job stops at the next step. */
  stopped: boolean;
  /** The last failure of the whole job (no per-message outcome), for the unsent messages. */
  lastError: PublishError | undefined;
}

export class KafkaPublisher implements Publisher {
  readonly name = 'kafka';
  readonly #settings: KafkaSettings;
  readonly #producer: KafkaProducer;
  readonly #owned: boolean;
  readonly #topics: KafkaTopics;
  readonly #lifecycle = new PublisherLifecycle('Kafka');
  /** The send jobs, one after the other. */
  #tail: Promise<void> = Promise.resolve();
  /** After a failed send: the idempotent producer takes a new producer id before the next send. */
  #reinit = false;

  constructor(settings: KafkaSettings) {
    this.#settings = settings;
    this.#owned = settings.client === undefined;
    this.#producer = settings.client ?? createProducer(settings);
    this.#topics = new KafkaTopics(settings, this.#producer);
  }

  async publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    this.#lifecycle.assertOpen();
    const outcomes = new Map<number, PublishOutcome>();
    const items: Item[] = [];
    batch.forEach((message, index) => {
      const prepared = prepare(message, index, this.#settings);
      if (isOutcome(prepared)) outcomes.set(index, prepared);
      else items.push(prepared);
    });
    if (items.length === 0) return batch.map((_, i) => outcomes.get(i)!);

    const job: Job = { items, outcomes, stopped: false, lastError: undefined };
    const run = this.#tail.then(() => this.#run(job));
    this.#tail = run.catch(() => undefined);
    // close() does not end a publish: it waits for the jobs in flight (no `closing` here).
    const timeoutMs = this.#settings.timeoutMs;
    const abort = new CallAbort({ signal, timeoutMs });
    const giveUp = abort.aborted.catch((why: unknown) => {
      throw gaveUp(abort.cause ?? 'caller', why, timeoutMs);
    });
    let reason: PublishError | undefined;
    try {
      await Promise.race([run, giveUp]);
    } catch (error) {
      reason = error instanceof PublishError ? error : unexpected(error);
      // Given up while the client still tries to reach a broker: the broker's fault, not the events'.
      if (!this.#producer.isConnected()) {
        reason = new PublishError(`Kafka is not available: ${reason.message}`, {
          retryable: true,
          code: BROKER_UNAVAILABLE,
          cause: reason,
        });
      }
    } finally {
      abort.dispose();
      job.stopped = true;
    }
    // A snapshot: a send still under way after the deadline must not change what we return.
    return batch.map((_, i) => {
      const outcome = outcomes.get(i);
      if (outcome !== undefined) return outcome;
      const error = job.lastError ?? reason ?? unexpected(new Error('no outcome'));
      return failed(error, true);
    });
  }

  close(): Promise<void> {
    return this.#lifecycle.close(() => this.#shutdown());
  }

  /** Sends a publish's messages; runs alone (one job at a time). */
  async #run(job: Job): Promise<void> {
    if (job.stopped) return;
    const producer = this.#producer;
    if (this.#reinit && producer.producerId !== undefined) {
      try {
        await producer.initIdempotentProducer({});
        this.#reinit = false;
      } catch (error) {
        job.lastError = classify(error, 'a new producer id');
        return;
      }
    }
    if (job.stopped) return;

    // Partition counts, per topic; a topic that cannot be used fails its own messages only.
    const ready: Item[] = [];
    for (const [topic, items] of groupBy(job.items, (item) => item.topic)) {
      const partitions = await this.#topics.partitions(topic);
      if (typeof partitions !== 'number') {
        for (const item of items) job.outcomes.set(item.index, partitions);
        continue;
      }
      for (const item of items) {
        item.partition = partitionFor(item.key, partitions);
        ready.push(item);
      }
      if (job.stopped) return;
    }

    // One request per chunk; a partition's records in a chunk fit maxMessageBytes.
    const queue = chunk(ready, this.#settings.maxMessageBytes);
    while (queue.length > 0 && !job.stopped) {
      const items = queue.shift()!;
      // Halves of a partition's records the broker found too large together go next, in order.
      queue.unshift(...(await this.#send(producer, items, job)));
      if (job.lastError?.code === BROKER_UNAVAILABLE) return;
    }
  }

  /**
   * One produce call. Records the outcome of each message it settles; returns what to send
   * again (see settleFailedSend).
   */
  async #send(producer: KafkaProducer, items: readonly Item[], job: Job): Promise<Item[][]> {
    try {
      await producer.send({ messages: records(items), acks: ProduceAcks.ALL });
      for (const item of items) job.outcomes.set(item.index, DELIVERED);
      return [];
    } catch (error) {
      // The producer's sequence numbers may now disagree with the broker's.
      this.#reinit = true;
      const general = classify(error, items.length === 1 ? `topic "${items[0]!.topic}"` : 'the batch');
      const settled = settleFailedSend(items, error, general);
      for (const [index, outcome] of settled.outcomes) job.outcomes.set(index, outcome);
      if (settled.whole !== undefined) job.lastError = settled.whole;
      return settled.again;
    }
  }

  async #shutdown(): Promise<void> {
    // Every queued or running send settles within a few timeouts (bounded retries).
    await this.#tail;
    await this.#topics.close();
    if (this.#owned) await this.#producer.close().catch(() => undefined);
  }
}
