/** Kafka's topic name rule, and the default topic of a message. */
import type { OutboxMessage } from '../contract.js';
import { defaultDestination } from '../core/destination.js';

const MAX_TOPIC_LENGTH = 249;
const TOPIC_PATTERN = /^[a-zA-Z0-9._-]+$/;

/** `message.topic`, else `${aggregateType}.${type}`. */
export const defaultTopic: (message: OutboxMessage) => string = defaultDestination;

/** Why Kafka would refuse the topic name, or undefined when it is fine. */
export function topicProblem(topic: string): string | undefined {
  if (topic.length === 0) return 'is empty';
  if (topic.length > MAX_TOPIC_LENGTH) {
    return `is ${topic.length} characters long; Kafka allows at most ${MAX_TOPIC_LENGTH}`;
  }
  if (topic === '.' || topic === '..') return 'is "." or ".."';
  if (!TOPIC_PATTERN.test(topic)) {
    const bad = /[^a-zA-Z0-9._-]/u.exec(topic)!;
    const code = bad[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0');
    return (
      `has characters other than ASCII letters, digits, ".", "_" and "-" ` +
      `(${JSON.stringify(bad[0])} U+${code} at index ${bad.index})`
    );
  }
  return undefined;
}
