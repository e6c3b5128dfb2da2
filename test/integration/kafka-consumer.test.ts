/**
 * Kafka-only behaviour of consumeKafka: the record headers it reads, consumer-group rebalances.
 * What every adapter shares (exactly once, ordering policies, quarantine, stop, the 0.1
 * envelope) is in test/contract/kafka-consumer.contract.test.ts.
 */
import { randomBytes } from 'node:crypto';
import { Admin, Producer } from '@platformatic/kafka';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Consumer, consumeKafka } from '../../src/consumers/kafka/index.js';
import { envelopeHeaders } from '../../src/envelope/bindings.js';
import type { InboxEvent } from '../../src/inbox/decode.js';
import { createInbox, type Inbox, type InboxHandler } from '../../src/inbox/inbox.js';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';
import { kafkaPublisher } from '../../src/publishers/kafka/index.js';
import { previousEnvelopeHeaders } from '../../src/testing/index.js';
import { createTestDb, type TestDb, waitFor } from '../helpers/db.js';
import { appliedEffects, createEffectsTable, effectsHandler } from '../helpers/effects.js';
import { committedToEnd, KAFKA_BROKER, kafkaAvailable } from '../helpers/kafka.js';
import { makeMessage, publishAll } from '../helpers/messages.js';

const kafkaUp = await kafkaAvailable('kafka-consumer.test.ts:');
const suffix = randomBytes(4).toString('hex');
const PARTITIONS = 4;
let db: TestDb;
let admin: Admin;
let publisher: Publisher;
const topics: string[] = [];
const consumers: Consumer[] = [];

describe.skipIf(!kafkaUp)(`consumeKafka on ${KAFKA_BROKER}`, () => {
  beforeAll(async () => {
    db = await createTestDb('kafka_consumer');
    await createEffectsTable(db);
    admin = new Admin({ clientId: 'txo-kcons-test', bootstrapBrokers: [KAFKA_BROKER] });
    publisher = kafkaPublisher({
      url: [KAFKA_BROKER],
      clientId: 'txo-kcons-test',
      destination: (m) => m.topic ?? '',
    });
  });

  afterAll(async () => {
    await Promise.all(consumers.map((c) => c.stop()));
    await publisher?.close();
    if (topics.length > 0) await admin?.deleteTopics({ topics }).catch(() => undefined);
    await admin?.close();
    await db?.close();
  }, 30_000);

  it("reads the Kafka binding's headers, 0.1's ce-* headers, and a record with a null header value", async () => {
    const topic = `txo-khdr-${suffix}`;
    const consumerName = `kafka-headers-${suffix}`;
    topics.push(topic);
    await admin.createTopics({ topics: [topic], partitions: 1, replicas: 1 });
    const aggregateId = ' café 50%41 "x" ';
    const headers = {
      traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      'x-note': 'a %41; b',
    };
    const [current, previous, nullHeader] = [1, 2, 3].map((sequence) =>
      makeMessage({ aggregateId, sequence, topic, headers }),
    ) as [OutboxMessage, OutboxMessage, OutboxMessage];
    await publishAll(publisher, [current]);
    const raw = new Producer<Buffer, Buffer, Buffer, Buffer>({
      clientId: 'txo-khdr-raw',
      bootstrapBrokers: [KAFKA_BROKER],
    });
    try {
      const record = (m: OutboxMessage, envelope: Record<string, string>) => ({
        topic,
        partition: 0,
        key: Buffer.from(m.aggregateId),
        value: Buffer.from(m.payload),
        headers: new Map<Buffer, Buffer>(
          Object.entries(envelope).map(([k, v]) => [Buffer.from(k), Buffer.from(v)]),
        ),
      });
      const withNull = record(nullHeader, envelopeHeaders(nullHeader, 'urn:other', 'kafka'));
      // Kafka allows a null header value (a Java producer's `headers.add("x-null", null)`).
      withNull.headers.set(Buffer.from('x-null'), null as unknown as Buffer);
      await raw.send({
        messages: [record(previous, previousEnvelopeHeaders(previous, 'legacy-relay')), withNull],
      });
    } finally {
      await raw.close();
    }
    const seen: InboxEvent[] = [];
    const consumer = await consumeKafka({
      inbox: createInbox({ pool: db.pool, consumer: consumerName, schema: db.schema, ordering: 'strict' }),
      handler: async (_tx, event) => {
        seen.push(event);
      },
      url: [KAFKA_BROKER],
      topic,
      group: topic,
    });
    consumers.push(consumer);
    await waitFor(async () => seen.length >= 3, { what: 'the three records handled', timeoutMs: 30_000 });
    await consumer.stop();
    expect(seen.map((e) => [e.eventId, e.aggregateId, e.sequence, e.contentType])).toEqual(
      [current, previous, nullHeader].map((m) => [m.eventId, aggregateId, m.sequence, 'application/json']),
    );
    expect(seen.map((e) => e.headers['ce-source'])).toEqual(['tx-outbox', 'legacy-relay', 'urn:other']);
    for (const e of seen) {
      expect(e.headers['ce-subject']).toBe(aggregateId);
      expect(e.headers['x-note']).toBe('a %41; b');
      expect(e.headers['traceparent']).toBe(headers.traceparent);
    }
    expect(seen[2]!.headers['x-null']).toBeUndefined();
  }, 60_000);

  it('members joining and leaving mid-stream: every event applied once, in order, everything committed', async () => {
    const topic = `txo-kreb-${suffix}`;
    const consumerName = `kafka-rebalance-${suffix}`;
    topics.push(topic);
    await admin.createTopics({ topics: [topic], partitions: PARTITIONS, replicas: 1 });
    const aggregates = 24;
    const perAggregate = 12;
    const events: OutboxMessage[] = [];
    for (let sequence = 1; sequence <= perAggregate; sequence += 1)
      for (let a = 0; a < aggregates; a += 1)
        events.push(makeMessage({ aggregateId: `k${a}`, sequence, topic }));
    /** Publishes the next third of the events (sequences 1–4, 5–8, 9–12 of every aggregate). */
    const publishThird = async (third: number) => {
      const part = events.slice(third * aggregates * 4, (third + 1) * aggregates * 4);
      await publishAll(publisher, part);
    };

    const inbox = createInbox({
      pool: db.pool,
      consumer: consumerName,
      schema: db.schema,
      ordering: 'strict',
    });
    const apply = effectsHandler(db, consumerName);
    // Slow enough that rebalances land while records are in flight.
    const handler: InboxHandler = async (tx, event) => {
      await apply(tx, event);
      await new Promise((resolve) => setTimeout(resolve, 15));
    };
    const statuses: Record<string, number> = {};
    const byMember = [0, 0, 0];
    const member = (index: number): Inbox => ({
      consumer: inbox.consumer,
      replayReleased: (h, o) => inbox.replayReleased(h, o),
      stats: () => inbox.stats(),
      async handle(message, h) {
        const result = await inbox.handle(message, h);
        statuses[result.status] = (statuses[result.status] ?? 0) + 1;
        if (result.status === 'processed') byMember[index] = (byMember[index] ?? 0) + 1;
        return result;
      },
    });
    const start = async (index: number): Promise<Consumer> => {
      const c = await consumeKafka({
        inbox: member(index),
        handler,
        url: [KAFKA_BROKER],
        topic,
        group: topic,
        clientId: `txo-kreb-${index}`,
        concurrency: 4,
        deferMs: 50,
      });
      consumers.push(c);
      return c;
    };
    const applied = async () => (await appliedEffects(db, consumerName)).length;

    await publishThird(0);
    const a = await start(0);
    await waitFor(async () => (await applied()) >= 40, { what: 'member 0 under way', timeoutMs: 30_000 });
    await start(1); // rebalance: member 0 gives up partitions, maybe while handling them
    await publishThird(1);
    await waitFor(async () => byMember[1]! > 10, { what: 'member 1 under way', timeoutMs: 30_000 });
    await start(2); // another rebalance
    await publishThird(2);
    await waitFor(async () => byMember[2]! > 5, { what: 'member 2 under way', timeoutMs: 30_000 });
    await a.stop(); // leaves: its partitions go to the two others, which both keep running
    await waitFor(
      async () => (await applied()) === events.length && (await committedToEnd(admin, topic, PARTITIONS)),
      {
        // With two members left, a member committing a partition it no longer owns (from records
        // fetched before the rebalance) would move that partition's commit point back for good.
        what: 'every event applied and every offset committed',
        timeoutMs: 60_000,
      },
    );

    const rows = await appliedEffects(db, consumerName);
    expect(new Set(rows.map((r) => r.event_id)).size).toBe(events.length);
    expect(rows).toHaveLength(events.length);
    for (let i = 0; i < aggregates; i += 1)
      expect(rows.filter((r) => r.aggregate_id === `k${i}`).map((r) => r.sequence)).toEqual(
        Array.from({ length: perAggregate }, (_, s) => s + 1),
      );
    expect(statuses['processed']).toBe(events.length);
    expect(statuses['quarantined'] ?? 0).toBe(0);
    console.info(
      `kafka rebalance: processed by member ${byMember.join(' / ')}, duplicates ${statuses['duplicate'] ?? 0}, deferred ${statuses['deferred'] ?? 0}`,
    );
  }, 120_000);

  it('deferred records take no handling slot: independent aggregates keep flowing past them', async () => {
    const topic = `txo-kdef-${suffix}`;
    const consumerName = `kafka-deferred-${suffix}`;
    topics.push(topic);
    await admin.createTopics({ topics: [topic], partitions: 1, replicas: 1 });
    // Four aggregates each with a gap (sequence 2 never comes): their sequence 3 stays deferred.
    const gaps = ['g1', 'g2', 'g3', 'g4'].flatMap((id) => [
      makeMessage({ aggregateId: id, sequence: 1, topic }),
      makeMessage({ aggregateId: id, sequence: 3, topic }),
    ]);
    const independent = Array.from({ length: 20 }, (_, i) =>
      makeMessage({ aggregateId: `i${i}`, sequence: 1, topic }),
    );
    await publishAll(publisher, [...gaps, ...independent]);
    const consumer = await consumeKafka({
      inbox: createInbox({ pool: db.pool, consumer: consumerName, schema: db.schema, ordering: 'strict' }),
      handler: effectsHandler(db, consumerName),
      url: [KAFKA_BROKER],
      topic,
      group: topic,
      concurrency: 1, // reading would stop at 2 records waiting if deferred ones counted
      deferMs: 100,
    });
    consumers.push(consumer);
    await waitFor(async () => (await appliedEffects(db, consumerName)).length === 4 + 20, {
      what: 'the independent aggregates applied past the deferred records',
      timeoutMs: 30_000,
    });
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM "${db.schema}".inbox_quarantine WHERE consumer = $1`,
      [consumerName],
    );
    expect(rows[0].n).toBe(0); // still waiting for their sequence 2, not given up
    await consumer.stop();
  }, 60_000);

  it('a member keeping its partition through a rebalance loses nothing, even with nothing committed yet', async () => {
    // One partition; its head (X sequence 2) stays deferred, so no offset is ever committed
    // until X sequence 1 arrives. Member 1 joins while member 0 is mid-partition and keeps it:
    // the stream re-reads from the earliest offset; the records already received must neither
    // be lost (a commit past a gap) nor counted twice.
    const topic = `txo-kkeep-${suffix}`;
    const consumerName = `kafka-keep-${suffix}`;
    topics.push(topic);
    await admin.createTopics({ topics: [topic], partitions: 1, replicas: 1 });
    const head = makeMessage({ aggregateId: 'X', sequence: 2, topic });
    const rest = Array.from({ length: 300 }, (_, i) =>
      makeMessage({ aggregateId: `a${i}`, sequence: 1, topic }),
    );
    await publishAll(publisher, [head, ...rest]);
    const inbox = createInbox({
      pool: db.pool,
      consumer: consumerName,
      schema: db.schema,
      ordering: 'strict',
      maxDeferrals: 100_000,
    });
    const apply = effectsHandler(db, consumerName);
    const handler: InboxHandler = async (tx, event) => {
      await apply(tx, event);
      await new Promise((resolve) => setTimeout(resolve, 20));
    };
    const common = {
      inbox,
      handler,
      url: [KAFKA_BROKER],
      topic,
      group: topic,
      concurrency: 1,
      deferMs: 100,
      // Heartbeats every 500 ms: the rebalance lands while member 0 is mid-partition.
      sessionTimeoutMs: 6000,
      heartbeatIntervalMs: 500,
    };
    consumers.push(await consumeKafka({ ...common, clientId: 'txo-kkeep-0' }));
    const applied = async () => (await appliedEffects(db, consumerName)).length;
    await waitFor(async () => (await applied()) >= 20, { what: 'member 0 under way', timeoutMs: 30_000 });
    consumers.push(await consumeKafka({ ...common, clientId: 'txo-kkeep-1' }));
    await new Promise((resolve) => setTimeout(resolve, 3000)); // the rebalance settles
    const x1 = makeMessage({ aggregateId: 'X', sequence: 1, topic });
    await publishAll(publisher, [x1]);
    await waitFor(async () => (await applied()) === 302 && (await committedToEnd(admin, topic, 1)), {
      what: 'every event applied and the partition committed to its end',
      timeoutMs: 60_000,
    });
    const rows = await appliedEffects(db, consumerName);
    expect(new Set(rows.map((r) => r.event_id)).size).toBe(302);
  }, 120_000);
});
