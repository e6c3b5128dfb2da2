import type { OutboxMessage } from '../contract.js';

/** `message.topic`, else `${aggregateType}.${type}`: the default subject, topic, routing key or stream. */
export function defaultDestination(message: OutboxMessage): string {
  return message.topic !== null && message.topic !== ''
    ? message.topic
    : `${message.aggregateType}.${message.type}`;
}
