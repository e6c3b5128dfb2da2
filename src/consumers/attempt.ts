import type { Inbox, InboxHandler } from '../inbox/inbox.js';
import type { InboxMessage } from '../inbox/message.js';
import type { Logger } from '../logger.js';
import { aggregateKey } from './consumer.js';
import { type DeferPolicy, deferDelay } from './defer.js';
import type { KeyedQueue } from './keyed-queue.js';

/** What {@link handleAttempt} needs of an adapter's resolved options. */
export interface AttemptOptions<T, Tx> {
  readonly inbox: Inbox<T, Tx>;
  readonly handler: InboxHandler<T, Tx>;
  readonly defer: DeferPolicy;
  readonly logger: Logger;
}

/**
 * One attempt at handling `message` through the inbox, one delivery of an aggregate at a time
 * (`queue`): undefined once the inbox answered anything but `deferred`, else the delay before
 * the next attempt — the deferral's (see ./defer.ts), or `deferMs` when the inbox itself failed
 * (database down …: nothing was committed), which is logged with `failure`. For the adapters that
 * retry in process (MQTT, Kafka): a broker without a negative ack, or an offset kept uncommitted.
 */
export async function handleAttempt<T, Tx>(
  queue: KeyedQueue,
  o: AttemptOptions<T, Tx>,
  message: InboxMessage,
  failure: string,
): Promise<number | undefined> {
  try {
    const result = await queue.run(aggregateKey(message), () => o.inbox.handle(message, o.handler));
    if (result.status !== 'deferred') return undefined;
    return deferDelay(o.defer, result.attempts);
  } catch (error) {
    o.logger.error({ err: error, eventId: message.eventId }, failure);
    return o.defer.deferMs;
  }
}
