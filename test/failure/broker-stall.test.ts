/**
 * A network stall between the relay and NATS: the TCP connection stays open (the client sees
 * no error, its pings come every two minutes) but nothing gets through, for longer than
 * timeoutMs × maxAttempts. The overdue PubAcks must be the broker's fault (no attempt
 * charged), not the events': nothing goes dead, everything is published after the stall,
 * and the relay's log says the broker is unavailable, reminds, and says when it is back.
 * A private nats-server behind a TcpProxy (src/testing/tcp-proxy.ts) that hangs up with an RST.
 */
import { randomBytes } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isBrokerUnavailable } from '../../src/errors.js';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import { type NatsPublishMode, natsPublisher } from '../../src/publishers/nats/index.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import { TcpProxy } from '../../src/testing/tcp-proxy.js';
import { createTestDb, inTransaction, type TestDb, waitFor } from '../helpers/db.js';
import { makeMessage } from '../helpers/messages.js';
import { orderViolations, readStream } from '../helpers/nats-stream.js';
import { PrivateNats } from '../helpers/processes.js';

let db: TestDb;
let nats: PrivateNats;

beforeAll(async () => {
  db = await createTestDb('stall');
  nats = await PrivateNats.start();
});
afterAll(async () => {
  await nats?.destroy();
  await db?.close();
});

interface Line {
  readonly level: string;
  readonly msg: string;
  readonly obj: Record<string, unknown>;
}

function recordingLogger(lines: Line[]) {
  const at =
    (level: string) =>
    (obj: object, msg = ''): void => {
      lines.push({ level, msg, obj: obj as Record<string, unknown> });
    };
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

function events(prefix: string, count: number, from: number): OutboxEvent[] {
  return Array.from({ length: count }, (_, k) => ({
    aggregateType: 'order',
    aggregateId: `${prefix}-a${(from + k) % 7}`,
    type: 'order.changed',
    topic: `${prefix}.order`,
    payload: { i: from + k },
  }));
}

async function rows(): Promise<Array<{ status: string; attempts: number }>> {
  const { rows: r } = await db.pool.query(`SELECT status, attempts FROM "${db.schema}".events`);
  return r;
}

describe.each<NatsPublishMode>(['pipeline', 'client'])('failure: NATS link stalls (%s mode)', (mode) => {
  it('charges no attempt for PubAcks lost in the stall, publishes everything after it, and logs the outage', async () => {
    const proxy = await TcpProxy.start({ host: '127.0.0.1', port: nats.port }, { hangUp: 'reset' });
    const tag = randomBytes(4).toString('hex');
    const stream = `TXO_STALL_${tag}`;
    const prefix = `stall${tag}`;
    const publisher = natsPublisher({
      url: `nats://127.0.0.1:${proxy.port}`,
      stream,
      streamSubjects: [`${prefix}.>`],
      timeoutMs: 400,
      mode,
    });
    const lines: Line[] = [];
    const relay = createRelay({
      pool: db.pool,
      publisher,
      schema: db.schema,
      pollIntervalMs: 50,
      maxAttempts: 3,
      backoff: { baseMs: 50, capMs: 200 },
      outageReminderMs: 1000,
      random: () => 0.5,
      logger: recordingLogger(lines),
    });
    try {
      await relay.start();
      await inTransaction(db.pool, (tx) => enqueue(tx, events(prefix, 10, 0), { schema: db.schema }));
      await waitFor(async () => (await rows()).length === 0, { what: 'first events delivered' });

      proxy.stall();
      await inTransaction(db.pool, (tx) => enqueue(tx, events(prefix, 30, 10), { schema: db.schema }));
      // Well past timeoutMs × maxAttempts (1.2 s) plus backoff: old code had every event dead by then.
      await new Promise((r) => setTimeout(r, 5000));
      const during = await rows();
      expect(during).toHaveLength(30);
      expect(during.filter((r) => r.status === 'dead')).toEqual([]);
      expect(during.every((r) => r.attempts === 0)).toBe(true);
      expect(relay.stats().unavailable).toBeGreaterThan(0);

      await proxy.resume();
      await waitFor(async () => (await rows()).length === 0, {
        timeoutMs: 30_000,
        what: 'backlog delivered',
      });
      const stored = await readStream(nats.url, stream);
      expect(stored).toHaveLength(40); // the copies held in the stall were deduplicated by Nats-Msg-Id
      expect(new Set(stored.map((s) => s.eventId)).size).toBe(40);
      expect(orderViolations(stored)).toEqual([]);
      expect(relay.stats().dead).toBe(0);

      const said = (msg: string) => lines.filter((l) => l.msg === msg);
      const first = said('broker unavailable: publishes refused; retrying with backoff, no attempt charged');
      expect(first).toHaveLength(1);
      expect(first[0]!.level).toBe('warn');
      expect(String(first[0]!.obj['error'])).toMatch(/in doubt/);
      const reminders = said('broker still unavailable');
      expect(reminders.length).toBeGreaterThan(0);
      expect(reminders[0]!.obj['downForMs']).toBeGreaterThanOrEqual(1000);
      const back = said('broker available again');
      expect(back).toHaveLength(1);
      expect(back[0]!.level).toBe('info');
      expect(back[0]!.obj['downForMs']).toBeGreaterThanOrEqual(4000);
      expect(lines.filter((l) => l.msg.startsWith('event is dead'))).toEqual([]);
    } finally {
      await relay.stop({ timeout: 2000 });
      await publisher.close();
      await proxy.close();
    }
  });
});

describe.each<NatsPublishMode>(['pipeline', 'client'])('NATS PubAck timeouts (%s mode)', (mode) => {
  it('a PubAck overdue on a live link is still the message’s failure (an attempt), one on a stalled link is not', async () => {
    const proxy = await TcpProxy.start({ host: '127.0.0.1', port: nats.port }, { hangUp: 'reset' });
    const prefix = `ack${randomBytes(4).toString('hex')}`;
    // A core subscriber takes the message and never answers: no PubAck, while the link is fine.
    const silent = await connect({ servers: nats.url });
    silent.subscribe(`${prefix}.silent`);
    await silent.flush();
    const publisher = natsPublisher({ url: `nats://127.0.0.1:${proxy.port}`, timeoutMs: 300, mode });
    try {
      const live = await publisher.publish([makeMessage({ topic: `${prefix}.silent` })], signal());
      expect(live[0]!.ok).toBe(false);
      const liveError = (live[0] as { error: Error }).error;
      expect(liveError.message).toMatch(/Timed out after 300 ms/);
      expect(isBrokerUnavailable(liveError)).toBe(false);

      proxy.stall();
      const stalled = await publisher.publish([makeMessage({ topic: `${prefix}.silent` })], signal());
      const stalledError = (stalled[0] as { error: Error }).error;
      expect(stalledError.message).toMatch(/connection is in doubt/);
      expect(isBrokerUnavailable(stalledError)).toBe(true);
    } finally {
      await proxy.resume();
      await publisher.close();
      await silent.close();
      await proxy.close();
    }
  });
});

describe.each<NatsPublishMode>(['pipeline', 'client'])(
  'NATS link in doubt, other traffic still in (%s mode)',
  (mode) => {
    it('a PubAck lost on the way out is the link’s fault even while other messages come in', async () => {
      // Messages reaching the client after the publish do not prove the server read it: here a
      // subscription on the same connection keeps receiving while nothing the client sends gets
      // through (as when a stall begins while earlier PubAcks are still on their way).
      const proxy = await TcpProxy.start({ host: '127.0.0.1', port: nats.port }, { hangUp: 'reset' });
      const tag = randomBytes(4).toString('hex');
      const prefix = `oneway${tag}`;
      const direct = await connect({ servers: nats.url });
      await (await jetstreamManager(direct)).streams.add({
        name: `TXO_ONEWAY_${tag}`,
        subjects: [`${prefix}.>`],
      });
      const shared = await connect({ servers: `nats://127.0.0.1:${proxy.port}` });
      shared.subscribe(`${prefix}-chatter`, { callback: () => undefined });
      await shared.flush();
      const chatter = setInterval(() => direct.publish(`${prefix}-chatter`), 20);
      const publisher = natsPublisher({ client: shared, timeoutMs: 400, mode });
      try {
        const [warm] = await publisher.publish([makeMessage({ topic: `${prefix}.x` })], signal());
        expect(warm).toEqual({ ok: true });
        proxy.stall({ only: 'upstream' });
        const [outcome] = await publisher.publish([makeMessage({ topic: `${prefix}.x` })], signal());
        const error = (outcome as { error: Error }).error;
        expect(error.message).toMatch(/connection is in doubt/);
        expect(isBrokerUnavailable(error)).toBe(true);
      } finally {
        clearInterval(chatter);
        await proxy.resume();
        await publisher.close();
        await shared.close();
        await direct.close();
        await proxy.close();
      }
    });
  },
);

describe('NATS PubAck late within the probe (pipeline mode)', () => {
  it('a PubAck that arrives while the link is being probed is a delivery, not an attempt', async () => {
    const proxy = await TcpProxy.start({ host: '127.0.0.1', port: nats.port }, { hangUp: 'reset' });
    const tag = randomBytes(4).toString('hex');
    const prefix = `late${tag}`;
    const publisher = natsPublisher({
      url: `nats://127.0.0.1:${proxy.port}`,
      stream: `TXO_LATE_${tag}`,
      streamSubjects: [`${prefix}.>`],
      timeoutMs: 400,
    });
    try {
      const [warm] = await publisher.publish([makeMessage({ topic: `${prefix}.x` })], signal());
      expect(warm).toEqual({ ok: true });
      proxy.stall();
      const pending = publisher.publish([makeMessage({ topic: `${prefix}.x` })], signal());
      // Overdue at 400 ms; the probe waits until 800 ms; the stall ends at 600 ms.
      await new Promise((r) => setTimeout(r, 600));
      await proxy.resume();
      expect(await pending).toEqual([{ ok: true }]);
    } finally {
      await proxy.resume();
      await publisher.close();
      await proxy.close();
    }
  });
});

function signal(): AbortSignal {
  return new AbortController().signal;
}
