/**
 * RabbitMQ publisher (AMQP 0-9-1 through amqplib, an optional peer dependency):
 * `tx-outbox/rabbitmq`.
 *
 * The folder, a file per role: options.ts (the options, resolved once), wire.ts (what a message
 * becomes: exchange, routing key, properties, size rules), classify.ts (the broker's refusals as
 * outcomes), link.ts (the connection and its recovery), session.ts (a confirm channel and what
 * is in flight on it), publisher.ts (the class).
 */
import type { Publisher } from '../contract.js';
import { type RabbitMqPublisherOptions, resolveRabbitMqOptions } from './options.js';
import { RabbitMqPublisher } from './publisher.js';

export type { AmqpConnection } from './link.js';
export type { RabbitMqPublisherOptions } from './options.js';
export { defaultRoutingKey } from './wire.js';

/**
 * A {@link Publisher} for RabbitMQ (AMQP 0-9-1 through amqplib, an optional peer dependency).
 * Connects lazily at the first publish; after the connection or channel dropped, the next
 * publish opens a new one (a connection error never crashes the process: every connection and
 * channel it opens has its `error` listener).
 *
 * A whole batch is written on a confirm channel without waiting for each confirm (up to
 * `maxInFlight` unconfirmed messages across batches, and never past the channel's write buffer:
 * a full buffer waits for `drain`); the outcome of each message is decided by its own confirm.
 *
 * What an `{ ok: true }` outcome means: the broker confirmed the message (publisher
 * confirms) and did not return it, i.e. it was routed to at least one queue and, for
 * durable queues, written to disk (persistent message) — or, for a quorum queue, replicated
 * to a majority. That is the broker taking responsibility for it.
 *
 * Failures:
 * - **unroutable** (permanent): the message is `mandatory`, so when no queue is bound for
 *   its routing key the broker returns it (`basic.return`, 312 NO_ROUTE) instead of
 *   dropping it silently. That is a configuration problem (bind a queue, or give the
 *   exchange an alternate exchange), not something a retry cures: the event is parked
 *   dead, to be replayed once the binding exists. An exchange with an alternate exchange
 *   never returns messages; routing there counts as delivered.
 * - **too large** (permanent): a payload over `maxMessageBytes` or the broker's
 *   `max_message_size`, or headers too large for a frame.
 * - **nacked** (retryable): the broker refused to take it (e.g. a queue at its `x-max-length`
 *   with `overflow: reject-publish`, or an internal error).
 * - **exchange missing or not allowed** (retryable): it affects every event sent there, so
 *   it backs off until the exchange exists rather than killing every event at once.
 * - **broker unreachable, connection or channel closed, connection blocked by a resource
 *   alarm** (retryable, code `TXO_BROKER_UNAVAILABLE`: the relay does not charge the event
 *   an attempt). A message sent before the loss may have been stored all the same: the
 *   relay republishes it with the same `message-id` (consumers dedup, e.g. with the inbox).
 * - **no confirm within `timeoutMs`, or the batch's signal aborted** (retryable).
 *
 * `close()` is idempotent: it lets the batches in flight finish (each message settles
 * within `timeoutMs`; past that deadline they are failed as retryable), then closes the
 * channel and the connection it opened. Later publishes reject with an OutboxError
 * `TXO_PUBLISHER_CLOSED`.
 *
 * Old option spellings (`connection`, `socketOptions`, `routingKey`) still work, with one
 * DeprecationWarning each: use `client`, `clientOptions`, `destination`.
 *
 * @example
 * const publisher = rabbitmqPublisher({ url: 'amqp://guest:guest@127.0.0.1:5672', exchange: 'orders', assertExchange: true });
 */
export function rabbitmqPublisher(options: RabbitMqPublisherOptions): Publisher {
  return new RabbitMqPublisher(resolveRabbitMqOptions(options));
}
