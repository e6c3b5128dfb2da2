/**
 * `tx-outbox/rabbitmq`: the RabbitMQ publisher (AMQP 0-9-1 through amqplib, an optional peer
 * dependency). Files: options (resolved once), wire (what a message becomes), classify (the
 * broker's refusals as outcomes), link (the connection), session (a confirm channel and what
 * is in flight on it), publisher (the class).
 */
export type { AmqpConnection, RabbitMqPublisherOptions } from './options.js';
export { rabbitmqPublisher } from './publisher.js';
export { defaultRoutingKey } from './wire.js';
