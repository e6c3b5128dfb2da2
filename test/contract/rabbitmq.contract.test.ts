import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rabbitmqPublisher } from '../../src/publishers/rabbitmq/index.js';
import { publisherContract } from '../../src/testing/index.js';
import {
  cleanup,
  closeAdmin,
  exchangeOf,
  HOST,
  openAdmin,
  PORT,
  readQueue,
  received,
  topicOf,
  topology,
  url,
} from '../helpers/rabbitmq.js';

beforeAll(async () => {
  await openAdmin();
});

afterAll(async () => {
  await closeAdmin();
}, 30_000);

publisherContract(
  { describe, it, expect, beforeAll, afterAll },
  {
    name: 'rabbitmq',
    features: { orderedPerKey: true, brokerDedup: false, persistent: true },
    broker: { host: HOST, port: PORT },
    async create(address, ns, options) {
      await topology(ns);
      return rabbitmqPublisher({
        url: url(address.host, address.port),
        exchange: exchangeOf(ns),
        assertExchange: true,
        timeoutMs: 5_000,
        ...(options?.ceSource === undefined ? {} : { ceSource: options.ceSource }),
      });
    },
    topic: topicOf,
    async read(ns, expected) {
      return (await readQueue(ns, expected)).map(received);
    },
    // No queue is bound for this routing key: the broker returns the mandatory message.
    poison: (ns, message) => ({ ...message, topic: `${ns}.unroutable` }),
    cleanup,
    reconnectMs: 15_000,
    // read() decodes each message by the AMQP binding into a strict SDK CloudEvent.
    cloudEvents: true,
  },
);
