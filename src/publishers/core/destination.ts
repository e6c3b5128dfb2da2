import { routedType } from '../../skip-marker.js';
import type { OutboxMessage } from '../contract.js';

/**
 * `message.topic`, else `${aggregateType}.${type}`: the default subject, topic, routing key or
 * stream. A skip marker (`dead skip`) goes where the event it stands for would have gone.
 */
export function defaultDestination(message: OutboxMessage): string {
  return message.topic !== null && message.topic !== ''
    ? message.topic
    : `${message.aggregateType}.${routedType(message)}`;
}
