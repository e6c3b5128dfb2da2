/**
 * consumeKafka through a broker outage longer than the client library's few fetch retries
 * (3 × 1 s): the library destroys the consumer's stream with "fetch failed 4 times"; the
 * adapter must open a new one when the broker is back, and go on applying events — not sit
 * there alive and idle for good (found by the chaos harness: a Kafka restart stopped the
 * consumer, 11,022 events never applied). A private Kafka advertises a proxy that the test cuts.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Admin } from '@platformatic/kafka';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Consumer, consumeKafka } from '../../src/consumers/kafka.js';
import { createInbox } from '../../src/inbox/inbox.js';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';
import { kafkaPublisher } from '../../src/publishers/kafka.js';
import { TcpProxy } from '../../src/testing/tcp-proxy.js';
import { createTestDb, type TestDb, waitFor } from '../helpers/db.js';
import { appliedEffects, createEffectsTable, effectsHandler } from '../helpers/effects.js';
import { kafkaAvailable, PrivateKafka } from '../helpers/kafka.js';
import { makeMessage, publishAll } from '../helpers/messages.js';
import { freePort } from '../helpers/processes.js';

// A Kafka on 9092 means Java and the broker's jars are here (scripts/kafka.sh start).
const kafkaUp = await kafkaAvailable('kafka-outage.test.ts:');
const TOPIC = `txo-outage-${randomBytes(4).toString('hex')}`;
let db: TestDb;
let kafka: PrivateKafka | undefined;
let proxy: TcpProxy | undefined;
let publisher: Publisher | undefined;
let consumer: Consumer | undefined;

describe.skipIf(!kafkaUp)('consumeKafka: broker outage', () => {
  beforeAll(async () => {
    db = await createTestDb('kafka_outage');
    await createEffectsTable(db);
    const proxyPort = await freePort();
    kafka = await PrivateKafka.start({ advertisedPort: proxyPort });
    proxy = await TcpProxy.start({ host: '127.0.0.1', port: kafka.port }, proxyPort);
    const admin = new Admin({ clientId: 'txo-outage', bootstrapBrokers: [`127.0.0.1:${proxyPort}`] });
    await admin.createTopics({ topics: [TOPIC], partitions: 2, replicas: 1 });
    await admin.close();
    publisher = kafkaPublisher({ brokers: [`127.0.0.1:${proxyPort}`], clientId: 'txo-outage' });
  }, 240_000);

  afterAll(async () => {
    await consumer?.stop();
    await publisher?.close();
    await proxy?.close();
    await kafka?.destroy();
    await db?.close();
  }, 60_000);

  it('goes on applying events after the broker was unreachable for 8 s', async () => {
    const events = (from: number): OutboxMessage[] =>
      Array.from({ length: 10 }, (_, i) =>
        makeMessage({ aggregateId: `a${i % 5}`, sequence: from + Math.floor(i / 5), topic: TOPIC }),
      );
    const inbox = createInbox({ pool: db.pool, consumer: 'outage', schema: db.schema, ordering: 'strict' });
    consumer = await consumeKafka({
      inbox,
      handler: effectsHandler(db, 'outage'),
      brokers: [`127.0.0.1:${proxy!.port}`],
      topic: TOPIC,
      groupId: `txo-outage-${TOPIC}`,
    });
    await publishAll(publisher!, events(1));
    const applied = async (n: number) => (await appliedEffects(db, 'outage')).length >= n;
    await waitFor(() => applied(10), { timeoutMs: 60_000, what: 'the first 10 events applied' });

    await proxy!.cut();
    await sleep(8_000);
    await proxy!.restore();

    await publishAll(publisher!, events(3));
    await waitFor(() => applied(20), {
      timeoutMs: 60_000,
      what: 'the 10 events published after the outage applied',
    });
    const effects = await appliedEffects(db, 'outage');
    expect(effects).toHaveLength(20);
    for (let a = 0; a < 5; a++)
      expect(effects.filter((e) => e.aggregate_id === `a${a}`).map((e) => e.sequence)).toEqual([1, 2, 3, 4]);
  }, 180_000);
});
