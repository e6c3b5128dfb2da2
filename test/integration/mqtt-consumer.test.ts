import { randomUUID } from 'node:crypto';
import { connect as mqttConnect } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Consumer, consumeMqtt } from '../../src/consumers/mqtt.js';
import { createInbox, type InboxOptions } from '../../src/inbox/inbox.js';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';
import { mqttPublisher } from '../../src/publishers/mqtt.js';
import { createTestDb, type TestDb, waitFor } from '../helpers/db.js';
import { appliedEffects, createEffectsTable, effectsHandler } from '../helpers/effects.js';
import { makeMessage } from '../helpers/messages.js';

const MQTT_URL = process.env['MQTT_URL'] ?? 'mqtt://127.0.0.1:1883';
const suffix = randomUUID().slice(0, 8);
let db: TestDb;
const publishers: Publisher[] = [];
const consumers: Consumer[] = [];
const clientIds: string[] = [];
let counter = 0;

beforeAll(async () => {
  db = await createTestDb('mqtt_consumer');
  await createEffectsTable(db);
});

afterAll(async () => {
  await Promise.all(consumers.map((c) => c.stop()));
  await Promise.all(publishers.map((p) => p.close()));
  // Drop the persistent sessions the tests left on the broker.
  for (const clientId of clientIds) {
    const c = mqttConnect(MQTT_URL, { clientId, clean: true, protocolVersion: 5 });
    await new Promise<void>((resolve) => c.once('connect', () => resolve()));
    await c.endAsync();
  }
  await db?.close();
});

async function setup() {
  counter += 1;
  const topic = `txo-cons-${suffix}-${counter}`;
  const clientId = `txo-mqtt-${suffix}-${counter}`;
  const consumerName = `mqtt-${suffix}-${counter}`;
  clientIds.push(clientId);
  const publisher = mqttPublisher({ url: MQTT_URL, topic: (m) => `${topic}/${m.aggregateId}` });
  publishers.push(publisher);
  const handler = effectsHandler(db, consumerName);
  return {
    consumerName,
    async publish(...messages: OutboxMessage[]) {
      const outcomes = await publisher.publish(messages, new AbortController().signal);
      expect(outcomes.every((o) => o.ok)).toBe(true);
    },
    async consume(inbox: Partial<InboxOptions> = {}, extra: { signal?: AbortSignal } = {}) {
      const consumer = await consumeMqtt({
        inbox: createInbox({ pool: db.pool, consumer: consumerName, schema: db.schema, ...inbox }),
        handler,
        url: MQTT_URL,
        topic: `${topic}/#`,
        clientId,
        concurrency: 4,
        deferMs: 150,
        ...extra,
      });
      consumers.push(consumer);
      return consumer;
    },
    applied: () => appliedEffects(db, consumerName),
  };
}

async function deferrals(consumer: string, eventId: string): Promise<number> {
  const { rows } = await db.pool.query(
    `SELECT coalesce(sum(attempts), 0)::int AS n FROM "${db.schema}".inbox_attempts WHERE consumer = $1 AND event_id = $2`,
    [consumer, eventId],
  );
  return rows[0].n;
}

describe('consumeMqtt', () => {
  it('applies every event exactly once, even when the same event is published twice', async () => {
    const s = await setup();
    await s.consume();
    const once = makeMessage({ aggregateId: 'a', sequence: 1 });
    const other = makeMessage({ aggregateId: 'b', sequence: 1 });
    await s.publish(once, other);
    await s.publish(once);
    await waitFor(async () => (await s.applied()).length >= 2, { what: 'both applied' });
    await new Promise((r) => setTimeout(r, 300));
    const applied = await s.applied();
    expect(applied.map((r) => r.event_id).sort()).toEqual([once.eventId, other.eventId].sort());
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM "${db.schema}".inbox WHERE consumer = $1`,
      [s.consumerName],
    );
    expect(rows[0].n).toBe(2);
  });

  it('strict: a sequence delivered before its predecessor is deferred, handled again and applied after it', async () => {
    const s = await setup();
    await s.consume({ ordering: 'strict' });
    const [m1, m2, m3] = [1, 2, 3].map((sequence) => makeMessage({ aggregateId: 'x', sequence })) as [
      OutboxMessage,
      OutboxMessage,
      OutboxMessage,
    ];
    await s.publish(m1);
    await waitFor(async () => (await s.applied()).length === 1, { what: 'sequence 1' });
    await s.publish(m3);
    await waitFor(async () => (await deferrals(s.consumerName, m3.eventId)) >= 2, {
      what: 'sequence 3 deferred and handled again',
    });
    expect((await s.applied()).map((r) => r.sequence)).toEqual([1]);
    await s.publish(m2);
    await waitFor(async () => (await s.applied()).length === 3, { what: 'the aggregate applied in order' });
    expect((await s.applied()).map((r) => r.sequence)).toEqual([1, 2, 3]);
    expect(await deferrals(s.consumerName, m3.eventId)).toBe(0);
  });

  it('quarantines an event of an unaccepted schema version and acks it', async () => {
    const s = await setup();
    await s.consume({ accepts: [{ type: 'order.created', schemaVersion: 1 }] });
    const v2 = makeMessage({ aggregateId: 'q', sequence: 1, schemaVersion: 2 });
    const ok = makeMessage({ aggregateId: 'r', sequence: 1 });
    await s.publish(v2, ok);
    await waitFor(async () => (await s.applied()).length === 1, { what: 'both handled' });
    await waitFor(
      async () =>
        (
          await db.pool.query(`SELECT 1 FROM "${db.schema}".inbox_quarantine WHERE consumer = $1`, [
            s.consumerName,
          ])
        ).rowCount === 1,
      { what: 'quarantined' },
    );
    const { rows } = await db.pool.query(
      `SELECT event_id, reason FROM "${db.schema}".inbox_quarantine WHERE consumer = $1`,
      [s.consumerName],
    );
    expect(rows[0].event_id).toBe(v2.eventId);
    expect(rows[0].reason).toMatch(/schema version 2/);
    expect((await s.applied()).map((r) => r.event_id)).toEqual([ok.eventId]);
  });

  it('stop() drains, is idempotent; the persistent session keeps what arrives meanwhile', async () => {
    const s = await setup();
    const consumer = await s.consume();
    await s.publish(makeMessage({ aggregateId: 's', sequence: 1 }));
    await waitFor(async () => (await s.applied()).length === 1, { what: 'first applied' });
    await Promise.all([consumer.stop(), consumer.stop()]);
    await consumer.stop();
    await s.publish(makeMessage({ aggregateId: 's', sequence: 2 }));
    await new Promise((r) => setTimeout(r, 300));
    expect(await s.applied()).toHaveLength(1);

    const controller = new AbortController();
    const second = await s.consume({}, { signal: controller.signal });
    await waitFor(async () => (await s.applied()).length === 2, { what: 'resumed from the session' });
    controller.abort();
    await second.stop();
    await s.publish(makeMessage({ aggregateId: 's', sequence: 3 }));
    await new Promise((r) => setTimeout(r, 300));
    expect((await s.applied()).map((r) => r.sequence)).toEqual([1, 2]);
  });
});
