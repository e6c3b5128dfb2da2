/**
 * What a failed produce call says per partition: which partitions the broker acknowledged, which
 * it refused with which code, and so the outcome of each message of the call.
 */
import { PublishError } from '../../errors.js';
import { DELIVERED, failed, type PublishOutcome } from '../contract.js';
import { PERMANENT_CODES, TOO_LARGE_CODES, visit } from './classify.js';
import { groupBy } from './requests.js';
import { type Item, partitionKey } from './wire.js';

export interface Verdicts {
  /** `topic:partition` the broker acknowledged (in any attempt). */
  readonly delivered: Set<string>;
  /** `topic:partition` → the error code of its last failed attempt. */
  readonly failed: Map<string, number>;
}

/** The verdict on a partition's refusal: permanent for the codes a retry cannot cure. */
export function partitionError(code: number, topic: string, partition: number, cause: unknown): PublishError {
  const reason = PERMANENT_CODES.get(code);
  if (reason !== undefined) {
    return new PublishError(`Kafka refused the message for ${topic}[${partition}]: ${reason}`, {
      retryable: false,
      cause,
    });
  }
  return new PublishError(
    `Kafka could not store the message for ${topic}[${partition}] yet (error ${code})`,
    {
      retryable: true,
      cause,
    },
  );
}

/**
 * The per-partition results a failed send carries: the produce responses of every attempt
 * (a ResponseError's `response`) and the offsets of the requests that succeeded (`produced`).
 */
export function partitionVerdicts(error: unknown): Verdicts {
  const delivered = new Set<string>();
  const failedCodes = new Map<string, number>();
  visit(error, (node) => {
    const produced = (node as { produced?: { offsets?: { topic: string; partition: number }[] } }).produced;
    for (const o of produced?.offsets ?? []) delivered.add(`${o.topic}:${o.partition}`);
    const response = (node as { response?: unknown }).response as
      | { responses?: { name: string; partitionResponses?: { index: number; errorCode: number }[] }[] }
      | undefined;
    for (const topic of response?.responses ?? []) {
      for (const p of topic.partitionResponses ?? []) {
        const key = `${topic.name}:${p.index}`;
        if (p.errorCode === 0) delivered.add(key);
        else failedCodes.set(key, p.errorCode);
      }
    }
  });
  for (const key of delivered) failedCodes.delete(key);
  return { delivered, failed: failedCodes };
}

/** The outcomes of a failed produce call's messages, and what to send again. */
export interface FailedSend {
  /** Batch index → outcome, for the messages settled. */
  readonly outcomes: Map<number, PublishOutcome>;
  /**
   * The halves of each partition's records that the broker refused as too large together (the
   * topic's max.message.bytes is below maxMessageBytes), down to single messages, in order.
   */
  readonly again: Item[][];
  /** Set when the failure said nothing per partition: the verdict on the whole call. */
  readonly whole: PublishError | undefined;
}

/**
 * Settles the messages of a failed produce call: those of acknowledged partitions are
 * delivered, those of a partition refused with a code get that partition's verdict (or are
 * halved and sent again when too large together), the rest get `general`.
 */
export function settleFailedSend(items: readonly Item[], error: unknown, general: PublishError): FailedSend {
  const verdicts = partitionVerdicts(error);
  const outcomes = new Map<number, PublishOutcome>();
  const again: Item[][] = [];
  for (const [key, group] of groupBy(items, partitionKey)) {
    if (verdicts.delivered.has(key)) {
      for (const item of group) outcomes.set(item.index, DELIVERED);
      continue;
    }
    const code = verdicts.failed.get(key);
    if (code !== undefined && TOO_LARGE_CODES.has(code) && group.length > 1) {
      const half = Math.ceil(group.length / 2);
      again.push(group.slice(0, half), group.slice(half));
      continue;
    }
    const verdict =
      code === undefined ? general : partitionError(code, group[0]!.topic, group[0]!.partition, error);
    for (const item of group) outcomes.set(item.index, failed(verdict, verdict.retryable));
  }
  const whole = verdicts.failed.size === 0 && verdicts.delivered.size === 0 ? general : undefined;
  return { outcomes, again, whole };
}
