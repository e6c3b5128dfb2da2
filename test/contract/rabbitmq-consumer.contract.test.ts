import { randomBytes } from 'node:crypto';
import amqp, { type Channel, type ChannelModel, type ConfirmChannel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeRabbitMq } from '../../src/consumers/rabbitmq.js';
import type { Publisher } from '../../src/publishers/contract.js';
import { rabbitmqPublisher } from '../../src/publishers/rabbitmq/index.js';
import { consumerContract } from '../../src/testing/index.js';
import { DATABASE_URL } from '../helpers/env.js';
import { publishAll } from '../helpers/messages.js';
import { previousProperties } from '../helpers/rabbitmq.js';

const RABBITMQ_URL = process.env['RABBITMQ_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';
const ROOT = `txo-rmqcc-${randomBytes(4).toString('hex')}`;
const queueOf = (ns: string) => `${ROOT}.${ns}`;
let conn: ChannelModel;
let admin: Channel;
/** Publishes as tx-outbox 0.1 did, confirmed. */
let previous: ConfirmChannel;
let publisher: Publisher;

beforeAll(async () => {
  conn = await amqp.connect(RABBITMQ_URL);
  admin = await conn.createChannel();
  previous = await conn.createConfirmChannel();
  publisher = rabbitmqPublisher({
    url: RABBITMQ_URL,
    exchange: '',
    destination: (m) => queueOf(m.topic ?? ''),
  });
});
afterAll(async () => {
  await publisher?.close();
  await conn?.close().catch(() => undefined);
});

consumerContract(
  { describe, it, expect, beforeAll, afterAll },
  {
    name: 'rabbitmq',
    databaseUrl: DATABASE_URL,
    prepare: async (ns) => {
      await admin.assertQueue(queueOf(ns), { durable: false });
    },
    async publish(ns, messages, options) {
      if (!options?.previous) return publishAll(publisher, messages);
      for (const m of messages)
        previous.sendToQueue(queueOf(ns), Buffer.from(m.payload), previousProperties(m));
      await previous.waitForConfirms();
    },
    async publishForeign(ns) {
      admin.sendToQueue(queueOf(ns), Buffer.from('{}'), { headers: { foo: 'bar' } });
    },
    envelope: {
      binding: 'amqp',
      async publish(ns, m, pairs) {
        // A header table holds a name once (amqplib builds it from an object): the second of a
        // name goes in upper case, which a reader takes for the same attribute. The message-id
        // is the id header's, as rabbitmqPublisher sets it: none without one.
        const headers: Record<string, string> = {};
        for (const [name, value] of pairs) headers[name in headers ? name.toUpperCase() : name] = value;
        const messageId = headers['cloudEvents_id'];
        previous.sendToQueue(queueOf(ns), Buffer.from(m.payload), {
          headers,
          contentType: m.contentType,
          ...(messageId === undefined ? {} : { messageId }),
        });
        await previous.waitForConfirms();
      },
    },
    consume: (ns, setup) =>
      consumeRabbitMq({
        inbox: setup.inbox,
        handler: setup.handler,
        url: RABBITMQ_URL,
        queue: queueOf(ns),
        concurrency: setup.concurrency,
        deferMs: setup.deferMs,
        logger: setup.logger,
        ...(setup.signal ? { signal: setup.signal } : {}),
      }),
    // Ready messages only: RabbitMQ does not count unacked ones here (those held for a deferral).
    settled: async (ns) => (await admin.checkQueue(queueOf(ns))).messageCount === 0,
    async cleanup(ns) {
      await admin.deleteQueue(queueOf(ns));
    },
  },
);
