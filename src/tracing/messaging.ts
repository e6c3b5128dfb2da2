/**
 * The OpenTelemetry messaging semantic conventions tx-outbox's spans follow (semconv 1.27+:
 * `messaging.operation.type` `send` / `process`), as constants.
 */

export const ATTR_SYSTEM = 'messaging.system';
export const ATTR_DESTINATION = 'messaging.destination.name';
export const ATTR_MESSAGE_ID = 'messaging.message.id';
export const ATTR_OPERATION_TYPE = 'messaging.operation.type';
export const ATTR_OPERATION_NAME = 'messaging.operation.name';
export const ATTR_BATCH_COUNT = 'messaging.batch.message_count';
export const ATTR_CONSUMER_GROUP = 'messaging.consumer.group.name';
/** What the inbox answered (`processed`, `duplicate` …): tx-outbox's own attribute. */
export const ATTR_INBOX_STATUS = 'tx_outbox.inbox.status';
/** The event's aggregate sequence: tx-outbox's own attribute. */
export const ATTR_SEQUENCE = 'tx_outbox.aggregate.sequence';

/**
 * `messaging.system` of a publisher: the semconv value where there is one (`kafka`, `rabbitmq` for
 * AMQP 0-9-1), else the publisher's kind (`nats`, `redis`, `mqtt`, `webhook`: the conventions allow
 * custom values). A router names its publishers' kind when they share one; any other publisher
 * its own name.
 */
export function messagingSystem(publisherName: string): string {
  const routed = /^router\((.*)\)$/.exec(publisherName);
  if (routed) {
    const kinds = new Set(routed[1]!.split(',').map(messagingSystem));
    return kinds.size === 1 ? [...kinds][0]! : 'tx-outbox-router';
  }
  return publisherName;
}
