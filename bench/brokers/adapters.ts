/**
 * One adapter per broker for bench/brokers.ts: the destination a run publishes into (created
 * and removed around the run), the tx-outbox publisher the relay drives, and the raw client
 * loop that gives the broker's own publish ceiling with the same client library, the same
 * delivery guarantee and the same envelope headers.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { connect as tcpConnect } from 'node:net';
import { Admin, type MessageToProduce, ProduceAcks, Producer } from '@platformatic/kafka';
import amqp from 'amqplib';
import { connectAsync, type MqttClient } from 'mqtt';
import { createClient, type RedisArgument } from 'redis';
import { envelopeHeaders } from '../../src/envelope/bindings.js';
import type { OutboxMessage, Publisher } from '../../src/index.js';
import { kafkaPublisher, partitionFor } from '../../src/publishers/kafka/index.js';
import { mqttPublisher } from '../../src/publishers/mqtt/index.js';
import { natsPublisher } from '../../src/publishers/nats/index.js';
import { rabbitmqPublisher } from '../../src/publishers/rabbitmq/index.js';
import { redisPublisher } from '../../src/publishers/redis/index.js';
import { brokerCeiling } from '../systems/broker-ceiling.js';
import type { BenchContext } from '../systems/types.js';
import { benchEvent } from '../systems/workload.js';

export const KAFKA_BROKER = process.env['KAFKA_BROKER'] ?? '127.0.0.1:9092';
export const AMQP_URL = process.env['AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';
export const REDIS_URL = process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
export const MQTT_URL = process.env['MQTT_URL'] ?? 'mqtt://127.0.0.1:1883';

const SOURCE = 'tx-outbox';

export interface Workload {
  readonly events: number;
  readonly aggregates: number;
  readonly payloadBytes: number;
}

/** Where one run's messages land; `stored()` counts them there, `cleanup()` removes it all. */
export interface Destination {
  /** The topic / subject / routing key / stream key every event carries (`events.topic`). */
  readonly topic: string;
  publisher(): Publisher;
  stored(): Promise<number>;
  cleanup(): Promise<void>;
}

export interface BrokerAdapter {
  readonly name: string;
  /** host:port to probe before running; nothing listening → skipped. */
  readonly address: string;
  /** What the relay's publisher does that the raw loop does not (or vice versa), for the report. */
  readonly note?: string;
  destination(ctx: BenchContext): Promise<Destination>;
  /** Publishes `messages` with the raw client; resolves the seconds from first publish to last ack. */
  raw(ctx: BenchContext, dest: Destination, messages: readonly OutboxMessage[], w: Workload): Promise<number>;
}

/** True when something accepts TCP connections on host:port within 2 s. */
export function listening(address: string): Promise<boolean> {
  const at = address.lastIndexOf(':');
  return new Promise((resolve) => {
    const socket = tcpConnect({ host: address.slice(0, at), port: Number(address.slice(at + 1)) });
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(2000, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/** The workload's events as the relay hands them to a publisher (same ids, sequences, payloads). */
export function outboxMessages(topic: string, w: Workload): OutboxMessage[] {
  const createdAt = new Date();
  const sequences = new Map<string, number>();
  return Array.from({ length: w.events }, (_, i) => {
    const e = benchEvent(i, w.aggregates, w.payloadBytes);
    const sequence = (sequences.get(e.aggregateId) ?? 0) + 1;
    sequences.set(e.aggregateId, sequence);
    return {
      id: String(i + 1),
      eventId: randomUUID(),
      aggregateType: e.aggregateType,
      aggregateId: e.aggregateId,
      sequence,
      type: e.type,
      schemaVersion: 1,
      topic,
      payload: Buffer.from(JSON.stringify(e.payload)),
      contentType: 'application/json',
      headers: {},
      createdAt,
      attempts: 0,
    };
  });
}

const topicOf = (ctx: BenchContext): string => `${ctx.subjectPrefix}.order.changed`;

const asBuffer = (bytes: Uint8Array): Buffer =>
  Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

// --- NATS JetStream --------------------------------------------------------------------------

export const nats: BrokerAdapter = {
  name: 'NATS JetStream',
  address: '127.0.0.1:4222',
  async destination(ctx) {
    // benchContext already made the stream (`${subjectPrefix}.>`); it deletes it on close.
    return {
      topic: topicOf(ctx),
      publisher: () => natsPublisher({ url: ctx.natsUrl, stream: ctx.stream }),
      async stored() {
        const { connect } = await import('@nats-io/transport-node');
        const { jetstreamManager } = await import('@nats-io/jetstream');
        const nc = await connect({ servers: ctx.natsUrl });
        try {
          return (await (await jetstreamManager(nc)).streams.info(ctx.stream)).state.messages;
        } finally {
          await nc.close();
        }
      },
      cleanup: async () => undefined,
    };
  },
  async raw(ctx, _dest, messages, w) {
    // The existing raw pipeline: core publishes with reply subjects, one PubAck subscription;
    // it builds the same workload's messages itself and checks the stream gained all of them.
    const result = await brokerCeiling(ctx, {
      messages: messages.length,
      payloadBytes: w.payloadBytes,
      aggregates: w.aggregates,
      mode: 'raw',
    });
    return result.seconds;
  },
};

// --- Kafka -------------------------------------------------------------------------------------

const kafkaClient = { clientId: 'txo-bench-brokers', bootstrapBrokers: [KAFKA_BROKER] };

export const kafka: BrokerAdapter = {
  name: 'Kafka',
  address: KAFKA_BROKER,
  note: 'topic with the broker default of 1 partition; raw: one send of 1,000 at a time (idempotent producer)',
  async destination(ctx) {
    const topic = topicOf(ctx);
    const admin = new Admin(kafkaClient);
    // Created here (outside the timing) with the broker defaults, as `createTopics: true` would.
    await admin.createTopics({ topics: [topic] });
    return {
      topic,
      publisher: () => kafkaPublisher({ url: [KAFKA_BROKER], createTopics: true }),
      async stored() {
        const meta = await admin.metadata({ topics: [topic] });
        const count = meta.topics.get(topic)?.partitionsCount ?? 1;
        const listed = await admin.listOffsets({
          topics: [
            {
              name: topic,
              partitions: Array.from({ length: count }, (_, p) => ({ partitionIndex: p, timestamp: -1n })),
            },
          ],
        });
        let total = 0;
        for (const t of listed) for (const p of t.partitions) total += Number(p.offset);
        return total;
      },
      async cleanup() {
        await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
        await admin.close();
      },
    };
  },
  async raw(_ctx, dest, messages) {
    const producer = new Producer<Buffer, Buffer, Buffer, Buffer>({
      ...kafkaClient,
      idempotent: true,
      acks: ProduceAcks.ALL,
      autocreateTopics: false,
    });
    try {
      const meta = await producer.metadata({ topics: [dest.topic] });
      const partitions = meta.topics.get(dest.topic)?.partitionsCount ?? 1;
      await producer.initIdempotentProducer({});
      const names = new Map<string, Buffer>();
      const started = performance.now();
      for (let from = 0; from < messages.length; from += 1000) {
        const batch: MessageToProduce<Buffer, Buffer, Buffer, Buffer>[] = [];
        for (const m of messages.slice(from, from + 1000)) {
          const key = Buffer.from(m.aggregateId);
          const headers = new Map<Buffer, Buffer>();
          const envelope = envelopeHeaders(m, SOURCE, 'kafka');
          for (const name in envelope) {
            let nameBytes = names.get(name);
            if (nameBytes === undefined) {
              nameBytes = Buffer.from(name);
              names.set(name, nameBytes);
            }
            headers.set(nameBytes, Buffer.from(envelope[name]!));
          }
          batch.push({
            topic: dest.topic,
            partition: partitionFor(key, partitions),
            key,
            value: asBuffer(m.payload),
            headers,
          });
        }
        await producer.send({ messages: batch, acks: ProduceAcks.ALL });
      }
      return (performance.now() - started) / 1000;
    } finally {
      await producer.close().catch(() => undefined);
    }
  },
};

// --- RabbitMQ --------------------------------------------------------------------------------

export const rabbitmq: BrokerAdapter = {
  name: 'RabbitMQ',
  address: '127.0.0.1:5672',
  note: 'durable topic exchange, one durable classic queue; persistent, mandatory, publisher confirms',
  async destination(ctx) {
    const topic = topicOf(ctx);
    const exchange = `txo-bench-${ctx.subjectPrefix}`;
    const queue = `txo-bench-${ctx.subjectPrefix}`;
    const conn = await amqp.connect(AMQP_URL);
    const ch = await conn.createChannel();
    await ch.assertExchange(exchange, 'topic', { durable: true });
    await ch.assertQueue(queue, { durable: true });
    await ch.bindQueue(queue, exchange, topic);
    return {
      topic,
      exchange,
      publisher: () => rabbitmqPublisher({ url: AMQP_URL, exchange, assertExchange: true }),
      stored: async () => (await ch.checkQueue(queue)).messageCount,
      async cleanup() {
        await ch.deleteQueue(queue).catch(() => undefined);
        await ch.deleteExchange(exchange).catch(() => undefined);
        await conn.close().catch(() => undefined);
      },
    } as Destination & { exchange: string };
  },
  async raw(_ctx, dest, messages) {
    const exchange = (dest as Destination & { exchange: string }).exchange;
    const conn = await amqp.connect(AMQP_URL);
    try {
      const ch = await conn.createConfirmChannel();
      let returned = 0;
      ch.on('return', () => {
        returned += 1;
      });
      const started = performance.now();
      for (const m of messages) {
        const ok = ch.publish(exchange, dest.topic, asBuffer(m.payload), {
          persistent: true,
          mandatory: true,
          messageId: m.eventId,
          contentType: m.contentType,
          type: m.type,
          timestamp: Math.floor(m.createdAt.getTime() / 1000),
          headers: envelopeHeaders(m, SOURCE, 'amqp'),
        });
        if (!ok) await once(ch, 'drain');
      }
      await ch.waitForConfirms();
      const seconds = (performance.now() - started) / 1000;
      if (returned > 0) throw new Error(`RabbitMQ raw: ${returned} messages returned as unroutable`);
      await ch.close();
      return seconds;
    } finally {
      await conn.close().catch(() => undefined);
    }
  },
};

// --- Redis Streams ---------------------------------------------------------------------------

type Redis = ReturnType<typeof createClient>;

async function deleteKeys(client: Redis, pattern: string): Promise<void> {
  let batch: string[] = [];
  for await (const keys of client.scanIterator({ MATCH: pattern, COUNT: 10_000 })) {
    batch.push(...keys);
    if (batch.length >= 10_000) {
      await client.unlink(batch);
      batch = [];
    }
  }
  if (batch.length > 0) await client.unlink(batch);
}

export const redis: BrokerAdapter = {
  name: 'Redis Streams',
  address: '127.0.0.1:6379',
  note: 'relay: the publisher default, an EVALSHA dedup-guard script per event (XADD + SET EX); raw: plain XADD',
  async destination(ctx) {
    const topic = topicOf(ctx);
    const keyPrefix = `txo-bench-${ctx.subjectPrefix}`;
    const client: Redis = createClient({ url: REDIS_URL });
    client.on('error', () => undefined);
    await client.connect();
    return {
      topic,
      publisher: () => redisPublisher({ url: REDIS_URL, keyPrefix }),
      stored: () => client.xLen(topic),
      async cleanup() {
        await client.unlink(topic).catch(() => undefined);
        await deleteKeys(client, `${keyPrefix}:*`).catch(() => undefined);
        await client.close();
      },
    };
  },
  async raw(_ctx, dest, messages) {
    const client: Redis = createClient({ url: REDIS_URL });
    client.on('error', () => undefined);
    await client.connect();
    try {
      await client.ping();
      const started = performance.now();
      for (let from = 0; from < messages.length; from += 1000) {
        const pipeline = client.multi();
        for (const m of messages.slice(from, from + 1000)) {
          const args: RedisArgument[] = ['XADD', dest.topic, '*'];
          const envelope = envelopeHeaders(m, SOURCE, 'redis');
          for (const field in envelope) args.push(field, envelope[field]!);
          args.push('payload', asBuffer(m.payload));
          pipeline.addCommand(args);
        }
        await pipeline.execAsPipeline();
      }
      return (performance.now() - started) / 1000;
    } finally {
      await client.close();
    }
  },
};

// --- MQTT (Mosquitto) ------------------------------------------------------------------------

export const mqtt: BrokerAdapter = {
  name: 'MQTT (Mosquitto)',
  address: '127.0.0.1:1883',
  note: "MQTT 5, QoS 1; in flight capped by the broker's Receive Maximum; stored = arrivals at a QoS 1 subscriber",
  async destination(ctx) {
    const topic = topicOf(ctx);
    const subscriber: MqttClient = await connectAsync(MQTT_URL, { protocolVersion: 5, clean: true });
    let arrivals = 0;
    subscriber.on('message', () => {
      arrivals += 1;
    });
    await subscriber.subscribeAsync(topic, { qos: 1 });
    return {
      topic,
      publisher: () => mqttPublisher({ url: MQTT_URL }),
      async stored() {
        // Deliveries to the subscriber trail the PUBACKs a little: wait until they stop coming.
        let last = -1;
        while (arrivals !== last) {
          last = arrivals;
          await new Promise((r) => setTimeout(r, 300));
        }
        return arrivals;
      },
      async cleanup() {
        await subscriber.endAsync().catch(() => undefined);
      },
    };
  },
  async raw(_ctx, dest, messages) {
    const client = await connectAsync(MQTT_URL, { protocolVersion: 5, clean: true });
    try {
      const window = Math.min(1024, client.serverProperties?.receiveMaximum ?? 65_535);
      const total = messages.length;
      let next = 0;
      let acked = 0;
      let failures = 0;
      let finish!: () => void;
      const finished = new Promise<void>((resolve) => {
        finish = resolve;
      });
      const send = (): void => {
        const m = messages[next++]!;
        client.publish(
          dest.topic,
          asBuffer(m.payload),
          {
            qos: 1,
            properties: {
              userProperties: envelopeHeaders(m, SOURCE, 'mqtt'),
              contentType: m.contentType,
              payloadFormatIndicator: true,
            },
          },
          onAck,
        );
      };
      const onAck = (error?: Error | null): void => {
        if (error) failures += 1;
        acked += 1;
        if (acked === total) finish();
        else if (next < total) send();
      };
      const started = performance.now();
      for (let i = 0; i < Math.min(window, total); i++) send();
      await finished;
      const seconds = (performance.now() - started) / 1000;
      if (failures > 0) throw new Error(`MQTT raw: ${failures} publishes failed`);
      return seconds;
    } finally {
      await client.endAsync().catch(() => undefined);
    }
  },
};

export const ADAPTERS: Record<string, BrokerAdapter> = { nats, kafka, rabbitmq, redis, mqtt };
