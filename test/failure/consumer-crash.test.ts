/**
 * A consumer killed (kill -9) after the inbox commit but before the broker ack: the broker
 * redelivers, and the redelivery is a no-op (duplicate) — for every consumer adapter, on its
 * real broker and PostgreSQL. The consumer runs in its own process (the BUILT package, see
 * fixtures/consumer-process.mjs) that SIGKILLs itself right after `inbox.handle` committed; a
 * second consumer (in process, the same adapter) then gets the redelivery.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';
import { connect as natsConnect } from '@nats-io/transport-node';
import { Admin } from '@platformatic/kafka';
import amqp from 'amqplib';
import { connect as mqttConnect } from 'mqtt';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeKafka } from '../../src/consumers/kafka/index.js';
import { consumeMqtt } from '../../src/consumers/mqtt.js';
import { type Consumer, consumeNats } from '../../src/consumers/nats.js';
import { consumeRabbitMq } from '../../src/consumers/rabbitmq.js';
import { consumeRedis } from '../../src/consumers/redis.js';
import { createWebhookServer } from '../../src/consumers/webhook.js';
import { createInbox, type HandleStatus, type Inbox, type InboxHandler } from '../../src/inbox/inbox.js';
import type { InboxMessage } from '../../src/inbox/message.js';
import type { OutboxMessage, Publisher, PublishOutcome } from '../../src/publishers/contract.js';
import { kafkaPublisher } from '../../src/publishers/kafka/index.js';
import { mqttPublisher } from '../../src/publishers/mqtt/index.js';
import { natsPublisher } from '../../src/publishers/nats/index.js';
import { rabbitmqPublisher } from '../../src/publishers/rabbitmq/index.js';
import { redisPublisher } from '../../src/publishers/redis/index.js';
import { webhookPublisher } from '../../src/publishers/webhook/index.js';
import { createTestDb, type TestDb, waitFor } from '../helpers/db.js';
import { DATABASE_URL, NATS_URL } from '../helpers/env.js';
import { KAFKA_BROKER, kafkaAvailable } from '../helpers/kafka.js';
import { makeMessage } from '../helpers/messages.js';
import { deleteStream } from '../helpers/nats-stream.js';
import { exited, freePort, startFixture } from '../helpers/processes.js';

const REDIS_URL = process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
const RABBITMQ_URL = process.env['RABBITMQ_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';
const MQTT_URL = process.env['MQTT_URL'] ?? 'mqtt://127.0.0.1:1883';
const SECRET = `whsec_${Buffer.from('a-32-byte-secret-for-crash-tests').toString('base64')}`;

const FIXTURE = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'consumer-process.mjs');
// Unique per run: test files run in parallel against shared brokers.
const tag = randomBytes(4).toString('hex');

const kafkaUp = await kafkaAvailable('consumer-crash.test.ts: kafka case');

let db: TestDb;

beforeAll(async () => {
  db = await createTestDb('consumer_crash');
  await db.pool.query(`CREATE TABLE "${db.schema}".effects (consumer text, event_id uuid)`);
});
afterAll(async () => {
  await db?.close();
});

/** One broker's side of a case: its resources, publisher, and second consumer. */
interface Run {
  /** Broker options for the fixture process (besides broker, database and consumer). */
  readonly fixture: Record<string, unknown>;
  /** Publishes with the real tx-outbox publisher for the broker. */
  publish(message: OutboxMessage): Promise<PublishOutcome[]>;
  /** What the publisher got while the consumer handled the event and died. */
  checkPublished(outcomes: PublishOutcome[]): void;
  /** Asserts the broker still holds the message as not acknowledged (where observable). */
  checkUnacked(): Promise<void>;
  /** The second consumer: the same adapter, in process. */
  consume(inbox: Inbox, handler: InboxHandler): Promise<Consumer>;
  /** What makes the redelivery happen besides the second consumer (the webhook sender's retry). */
  redeliver?(message: OutboxMessage): Promise<void>;
  /** Asserts, once the second consumer stopped, that the broker got its acknowledgement. */
  checkSettled(): Promise<void>;
  close(): Promise<void>;
}

interface Case {
  readonly broker: 'nats' | 'redis' | 'rabbitmq' | 'kafka' | 'mqtt' | 'webhook';
  /** What acknowledges a delivery, for the test's name. */
  readonly ack: string;
  readonly up: boolean;
  open(): Promise<Run>;
}

const delivered = (outcomes: PublishOutcome[]): void => {
  expect(outcomes).toEqual([{ ok: true }]);
};

const cases: Case[] = [
  {
    broker: 'nats',
    ack: 'the JetStream ack',
    up: true,
    async open() {
      const stream = `TXO_CRASH_${tag}`;
      const subject = `crash${tag}.events`;
      const durable = 'crashy';
      const nc = await natsConnect({ servers: NATS_URL });
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: stream, subjects: [`crash${tag}.>`], storage: StorageType.Memory });
      const publisher = natsPublisher({ url: NATS_URL, stream, destination: () => subject });
      const info = () => jsm.consumers.info(stream, durable);
      return {
        fixture: { url: NATS_URL, stream, durable },
        publish: (m) => publisher.publish([m], new AbortController().signal),
        checkPublished: delivered,
        async checkUnacked() {
          const c = await info();
          expect(c.num_ack_pending).toBe(1);
          expect(c.ack_floor.stream_seq).toBe(0);
        },
        consume: (inbox, handler) =>
          consumeNats({ inbox, handler, url: NATS_URL, stream, durable, ackWaitMs: 1000 }),
        async checkSettled() {
          await waitFor(async () => (await info()).num_ack_pending === 0, { what: 'the JetStream ack' });
          expect((await info()).ack_floor.stream_seq).toBe(1);
        },
        async close() {
          await publisher.close();
          await nc.close();
          await deleteStream(NATS_URL, stream);
        },
      };
    },
  },
  {
    broker: 'redis',
    ack: 'XACK',
    up: true,
    async open() {
      const stream = `txo-crash-${tag}`;
      const group = 'inventory';
      const redis = createClient({ url: REDIS_URL });
      await redis.connect();
      const publisher = redisPublisher({ url: REDIS_URL, dedupWindowMs: 0, destination: () => stream });
      /** XPENDING summary: how many entries are pending, and for which consumers. */
      const pending = async () => {
        const [count, , , consumers] = (await redis.sendCommand(['XPENDING', stream, group])) as [
          number,
          unknown,
          unknown,
          Array<[string, string]> | null,
        ];
        return { count, consumers: consumers ?? [] };
      };
      return {
        fixture: { url: REDIS_URL, stream, group, consumerName: 'crashy' },
        publish: (m) => publisher.publish([m], new AbortController().signal),
        checkPublished: delivered,
        async checkUnacked() {
          expect(await pending()).toEqual({ count: 1, consumers: [['crashy', '1']] });
        },
        // Another instance of the group: XAUTOCLAIM hands it the dead consumer's pending entry.
        consume: (inbox, handler) =>
          consumeRedis({
            inbox,
            handler,
            url: REDIS_URL,
            stream,
            group,
            consumerName: 'survivor',
            blockMs: 200,
            claimIdleMs: 300,
          }),
        async checkSettled() {
          await waitFor(async () => (await pending()).count === 0, { what: 'the XACK' });
        },
        async close() {
          await publisher.close();
          await redis.del(stream);
          await redis.close();
        },
      };
    },
  },
  {
    broker: 'rabbitmq',
    ack: 'basic.ack',
    up: true,
    async open() {
      const queue = `txo-crash-${tag}`;
      const conn = await amqp.connect(RABBITMQ_URL);
      const admin = await conn.createChannel();
      await admin.assertQueue(queue, { durable: false });
      const publisher = rabbitmqPublisher({ url: RABBITMQ_URL, exchange: '', destination: () => queue });
      return {
        fixture: { url: RABBITMQ_URL, queue },
        publish: (m) => publisher.publish([m], new AbortController().signal),
        checkPublished: delivered,
        async checkUnacked() {
          // The dead connection's unacked delivery goes back to the queue, ready again.
          await waitFor(
            async () => {
              const q = await admin.checkQueue(queue);
              return q.messageCount === 1 && q.consumerCount === 0;
            },
            { timeoutMs: 5000, what: 'the unacked message requeued' },
          );
        },
        consume: (inbox, handler) => consumeRabbitMq({ inbox, handler, url: RABBITMQ_URL, queue }),
        async checkSettled() {
          // Acked, not merely delivered: nothing came back to the queue when the consumer closed.
          expect((await admin.checkQueue(queue)).messageCount).toBe(0);
        },
        async close() {
          await publisher.close();
          await admin.deleteQueue(queue).catch(() => undefined);
          await conn.close().catch(() => undefined);
        },
      };
    },
  },
  {
    broker: 'kafka',
    ack: 'the offset commit',
    up: kafkaUp,
    async open() {
      const topic = `txo-crash-${tag}`;
      const groupId = `txo-crash-${tag}`;
      const admin = new Admin({ clientId: 'txo-crash-test', bootstrapBrokers: [KAFKA_BROKER] });
      await admin.createTopics({ topics: [topic], partitions: 1, replicas: 1 });
      const publisher = kafkaPublisher({
        url: [KAFKA_BROKER],
        clientId: 'txo-crash-test',
        destination: () => topic,
      });
      const committed = async (): Promise<bigint | undefined> => {
        const [group] = await admin.listConsumerGroupOffsets({
          groups: [{ groupId, topics: [{ name: topic, partitionIndexes: [0] }] }],
        });
        return group?.topics.find((t) => t.name === topic)?.partitions[0]?.committedOffset;
      };
      return {
        // The broker declares the dead member gone after its session timeout: keep it short.
        fixture: { url: [KAFKA_BROKER], topic, group: groupId, sessionTimeoutMs: 6000 },
        publish: (m) => publisher.publish([m], new AbortController().signal),
        checkPublished: delivered,
        async checkUnacked() {
          expect(await committed()).toBe(-1n);
        },
        // The next member of the group: it gets the partition once the dead member's session expired.
        consume: (inbox, handler) =>
          consumeKafka({ inbox, handler, url: [KAFKA_BROKER], topic, group: groupId }),
        async checkSettled() {
          await waitFor(async () => (await committed()) === 1n, { what: 'the offset commit' });
        },
        async close() {
          await publisher.close();
          await admin.deleteGroups({ groups: [groupId] }).catch(() => undefined);
          await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
          await admin.close();
        },
      };
    },
  },
  {
    broker: 'mqtt',
    ack: 'the PUBACK',
    up: true,
    async open() {
      const topic = `txo-crash-${tag}/events`;
      const clientId = `txo-crash-${tag}`;
      const publisher = mqttPublisher({ url: MQTT_URL, destination: () => topic });
      /** DUP flags of the PUBLISH packets the second consumer's session received. */
      const dups: boolean[] = [];
      return {
        fixture: { url: MQTT_URL, topic, clientId },
        publish: (m) => publisher.publish([m], new AbortController().signal),
        checkPublished: delivered,
        // Not observable from outside the session; the redelivery's DUP flag is checked instead.
        async checkUnacked() {},
        async consume(inbox, handler) {
          // The same client id, clean=false: Mosquitto resumes the session and resends the PUBLISH
          // that was never PUBACKed. An own client, to see the packets.
          const client = mqttConnect(MQTT_URL, {
            protocolVersion: 5,
            clean: false,
            clientId,
            reconnectPeriod: 1000,
            properties: { sessionExpiryInterval: 300 },
          });
          client.on('packetreceive', (packet) => {
            if (packet.cmd === 'publish') dups.push(packet.dup);
          });
          const consumer = await consumeMqtt({ inbox, handler, client, topic, clientId });
          return {
            async stop() {
              await consumer.stop();
              await client.endAsync();
            },
          };
        },
        async checkSettled() {
          expect(dups).toEqual([true]);
        },
        async close() {
          await publisher.close();
          // Drop the persistent session.
          const c = mqttConnect(MQTT_URL, { clientId, clean: true, protocolVersion: 5 });
          await new Promise<void>((resolve) => c.once('connect', () => resolve()));
          await c.endAsync();
        },
      };
    },
  },
  {
    broker: 'webhook',
    ack: 'the HTTP answer',
    up: true,
    async open() {
      const port = await freePort();
      const publisher: Publisher = webhookPublisher({
        endpoints: `http://127.0.0.1:${port}/events`,
        secret: SECRET,
        timeoutMs: 5000,
      });
      let resent: PublishOutcome[] | undefined;
      return {
        fixture: { port, secret: SECRET },
        publish: (m) => publisher.publish([m], new AbortController().signal),
        // The receiver died before answering: a connection error, which the relay retries.
        checkPublished(outcomes) {
          expect(outcomes).toHaveLength(1);
          const [outcome] = outcomes;
          expect(outcome?.ok).toBe(false);
          if (outcome?.ok === false) expect(outcome.retryable).toBe(true);
        },
        async checkUnacked() {},
        // The receiver restarted on the same address.
        async consume(inbox, handler) {
          const server = await createWebhookServer({
            inbox,
            handler,
            secret: SECRET,
            port,
            host: '127.0.0.1',
          });
          return { stop: () => server.close() };
        },
        // The sender retries, as the relay does with a retryable outcome.
        async redeliver(m) {
          resent = await publisher.publish([m], new AbortController().signal);
        },
        async checkSettled() {
          expect(resent).toEqual([{ ok: true }]);
        },
        close: () => publisher.close(),
      };
    },
  },
];

/** The inbox, recording the status of every delivery it handled. */
function recording(inbox: Inbox): { inbox: Inbox; statuses: HandleStatus[] } {
  const statuses: HandleStatus[] = [];
  return {
    statuses,
    inbox: {
      consumer: inbox.consumer,
      replayReleased: (handler, options) => inbox.replayReleased(handler, options),
      stats: () => inbox.stats(),
      async handle<T>(message: InboxMessage, handler: InboxHandler<T>) {
        const result = await inbox.handle(message, handler);
        statuses.push(result.status);
        return result;
      },
    },
  };
}

describe('failure: consumer killed after the inbox commit, before the broker ack', () => {
  for (const c of cases) {
    it.skipIf(!c.up)(
      `${c.broker}: killed before ${c.ack}, the redelivery is a no-op (duplicate, one effect)`,
      async () => {
        const consumerName = `crash-${c.broker}`;
        const effects = async () =>
          (
            await db.pool.query(`SELECT event_id FROM "${db.schema}".effects WHERE consumer = $1`, [
              consumerName,
            ])
          ).rows.map((r: { event_id: string }) => r.event_id);
        const run = await c.open();
        let child: ChildProcess | undefined;
        try {
          const fixture = startFixture(FIXTURE, {
            broker: c.broker,
            databaseUrl: DATABASE_URL,
            schema: db.schema,
            consumer: consumerName,
            ...run.fixture,
          });
          child = fixture.child;
          const gone = exited(fixture.child);
          await Promise.race([
            waitFor(() => fixture.lines().some((l) => l['msg'] === 'consuming'), {
              timeoutMs: 15_000,
              what: `the ${c.broker} fixture to consume`,
            }),
            gone.then(() => {
              throw new Error(`the fixture exited early: ${JSON.stringify(fixture.lines())}`);
            }),
          ]);

          const message = makeMessage({ aggregateType: 'crash', aggregateId: `a-${c.broker}`, sequence: 1 });
          const published = run.publish(message);
          published.catch(() => undefined); // awaited below, once the fixture is gone
          await gone;
          expect(fixture.child.signalCode).toBe('SIGKILL');
          expect(fixture.lines().at(-1)).toEqual({
            msg: 'committed; crashing',
            eventId: message.eventId,
            status: 'processed',
          });
          run.checkPublished(await published);
          expect(await effects()).toEqual([message.eventId]);
          await run.checkUnacked();

          const watched = recording(
            createInbox({ pool: db.pool, consumer: consumerName, schema: db.schema }),
          );
          const handler: InboxHandler = (tx, event) =>
            tx.query(`INSERT INTO "${db.schema}".effects (consumer, event_id) VALUES ($1, $2)`, [
              consumerName,
              event.eventId,
            ]);
          const consumer = await run.consume(watched.inbox, handler);
          try {
            await run.redeliver?.(message);
            await waitFor(() => watched.statuses.length > 0, { timeoutMs: 20_000, what: 'the redelivery' });
          } finally {
            await consumer.stop();
          }
          expect(watched.statuses).toEqual(['duplicate']);
          await run.checkSettled();
          expect(await effects()).toEqual([message.eventId]);
        } finally {
          if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
          await run.close();
        }
      },
    );
  }
});
