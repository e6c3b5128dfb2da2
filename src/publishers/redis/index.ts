/** `tx-outbox/redis`: the Redis Streams publisher. */
import type { OutboxMessage } from '../contract.js';
import { defaultDestination } from '../core/destination.js';

export type { RedisClientLike, RedisMaxLen, RedisPublisherOptions } from './options.js';
export { redisPublisher } from './publisher.js';
export { PAYLOAD_FIELD } from './wire.js';

/** `message.topic`, else `${aggregateType}.${type}`: the default `destination`. */
export const defaultStream: (message: OutboxMessage) => string = defaultDestination;
