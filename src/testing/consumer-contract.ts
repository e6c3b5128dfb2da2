/**
 * One behaviour suite for every consumer adapter, on the real broker and a real PostgreSQL:
 * what the inbox promises (one effect per event, ordering policies, quarantine) must survive
 * each broker's delivery model (redelivery, acks, consumer groups, sessions). Test-runner
 * agnostic like {@link publisherContract}: pass your runner's `describe`, `it`, `expect`,
 * `beforeAll`, `afterAll`.
 *
 *   consumerContract({ describe, it, expect, beforeAll, afterAll }, {
 *     name: 'redis', databaseUrl, publish, publishForeign, consume, settled, cleanup,
 *   });
 *
 * Each test works in a namespace of its own (a stream, topic, queue … of the subject's
 * choosing) and a consumer name of its own; the suite owns a scratch PostgreSQL schema holding
 * the inbox tables and an `effects` table its handler writes, one row per applied event.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import type { Consumer } from '../consumers/consumer.js';
import {
  createInbox,
  type HandleResult,
  type Inbox,
  type InboxHandler,
  type InboxOptions,
} from '../inbox/inbox.js';
import type { InboxMessage } from '../inbox/message.js';
import type { OutboxMessage } from '../publishers/contract.js';
import { migrate } from '../schema/migrate.js';
import { contractMessage, type TestApi } from './publisher-contract.js';

/** What the suite hands to {@link ConsumerUnderTest.consume}. */
export interface ConsumerSetup {
  readonly inbox: Inbox;
  readonly handler: InboxHandler;
  /** 0, 1 …: instances of one namespace share the broker-side identity (group, durable, queue) where the broker has one. */
  readonly instance: number;
  readonly concurrency: number;
  /** How soon a deferred delivery should come back, ms (small: the suite waits for it). */
  readonly deferMs: number;
  readonly signal?: AbortSignal;
}

export interface ConsumerUnderTest {
  readonly name: string;
  /** PostgreSQL for the inbox; the suite creates a scratch schema and drops it afterwards. */
  readonly databaseUrl: string;
  /** Creates the namespace's destination (stream, topic, queue …), before anything is published or consumed. */
  prepare?(namespace: string): Promise<void>;
  /**
   * Publishes the messages to the namespace's destination in this order, as the relay would, and
   * resolves once the broker holds them (a webhook sender may keep retrying in the background).
   * A repeated event id must reach the broker again: no broker-side deduplication here.
   */
  publish(namespace: string, messages: readonly OutboxMessage[]): Promise<void>;
  /** Puts a message without a tx-outbox envelope where the namespace's consumer reads. */
  publishForeign(namespace: string): Promise<void>;
  /** Starts a consumer instance for the namespace. */
  consume(namespace: string, setup: ConsumerSetup): Promise<Consumer>;
  /** Whether every delivery of the namespace was acknowledged (nothing pending or awaiting redelivery). */
  settled?(namespace: string): Promise<boolean>;
  /** Removes what the namespace created on the broker. */
  cleanup?(namespace: string): Promise<void>;
  /** Upper bound for one wait of the suite, ms. Default 20000. */
  readonly timeoutMs?: number;
}

/** What the inbox answered, per event id, in the order answered. */
class Tally {
  readonly results = new Map<string, HandleResult['status'][]>();

  record(eventId: string, status: HandleResult['status']): void {
    const list = this.results.get(eventId) ?? [];
    list.push(status);
    this.results.set(eventId, list);
  }

  count(status: HandleResult['status'], eventId?: string): number {
    const lists = eventId ? [this.results.get(eventId) ?? []] : [...this.results.values()];
    return lists.reduce((n, list) => n + list.filter((s) => s === status).length, 0);
  }

  handled(eventId: string): number {
    return this.results.get(eventId)?.length ?? 0;
  }
}

interface Effect {
  readonly event_id: string;
  readonly aggregate_id: string;
  readonly sequence: number;
}

export function consumerContract(api: TestApi, subject: ConsumerUnderTest): void {
  const { describe, it, expect, beforeAll, afterAll } = api;
  const timeoutMs = subject.timeoutMs ?? 20_000;
  const testTimeout = timeoutMs * 3;
  const schema = `txo_cc_${subject.name.replace(/\W/g, '_').slice(0, 20)}_${randomBytes(4).toString('hex')}`;
  const run = randomUUID().slice(0, 8);
  let pool: pg.Pool;
  let counter = 0;
  const namespaces: string[] = [];
  const consumers: Consumer[] = [];

  /** A fresh namespace, its consumer name and its tally; `start` runs an instance through a counting inbox. */
  async function scenario(inboxOptions: Partial<InboxOptions> = {}, jitter = false) {
    counter += 1;
    const namespace = `txo-cc-${run}-${counter}`;
    namespaces.push(namespace);
    await subject.prepare?.(namespace);
    const tally = new Tally();
    const consumer = namespace;
    const inbox = createInbox({ pool, consumer, schema, ...inboxOptions });
    const counting: Inbox = {
      consumer: inbox.consumer,
      replayReleased: (handler, options) => inbox.replayReleased(handler, options),
      stats: () => inbox.stats(),
      async handle(message: InboxMessage, handler) {
        const result = await inbox.handle(message, handler);
        tally.record(message.eventId, result.status);
        return result;
      },
    };
    let failing: ((aggregateId: string) => boolean) | undefined;
    let gate: Promise<void> | undefined;
    let running = 0;
    let maxRunning = 0;
    const handler: InboxHandler = async (tx, event) => {
      running += 1;
      maxRunning = Math.max(maxRunning, running);
      try {
        if (gate) await gate;
        if (failing?.(event.aggregateId)) throw new Error(`refused ${event.aggregateId} on purpose`);
        await tx.query(
          `INSERT INTO "${schema}".effects (consumer, event_id, aggregate_id, sequence) VALUES ($1, $2, $3, $4)`,
          [consumer, event.eventId, event.aggregateId, event.sequence],
        );
        // A random pause: deliveries of one aggregate run side by side, they would finish out of order.
        await new Promise((resolve) => setTimeout(resolve, jitter ? Math.random() * 10 : 1));
      } finally {
        running -= 1;
      }
    };
    const s = {
      namespace,
      tally,
      message: (aggregateId: string, sequence: number, extra: Partial<OutboxMessage> = {}) =>
        contractMessage(namespace, aggregateId, sequence, { schemaVersion: 1, ...extra }),
      publish: (...messages: OutboxMessage[]) => subject.publish(namespace, messages),
      async start(instance = 0, options: { concurrency?: number; signal?: AbortSignal } = {}) {
        const c = await subject.consume(namespace, {
          inbox: counting,
          handler,
          instance,
          concurrency: options.concurrency ?? 4,
          deferMs: 150,
          ...(options.signal ? { signal: options.signal } : {}),
        });
        consumers.push(c);
        return c;
      },
      async applied(): Promise<Effect[]> {
        const { rows } = await pool.query<Effect>(
          `SELECT event_id, aggregate_id, sequence FROM "${schema}".effects WHERE consumer = $1 ORDER BY n`,
          [consumer],
        );
        return rows;
      },
      async quarantined(): Promise<Array<{ event_id: string; reason: string }>> {
        const { rows } = await pool.query(
          `SELECT event_id::text, reason FROM "${schema}".inbox_quarantine WHERE consumer = $1 ORDER BY event_id`,
          [consumer],
        );
        return rows;
      },
      settled: async () => (subject.settled ? subject.settled(namespace) : true),
      failWhen(predicate: (aggregateId: string) => boolean) {
        failing = predicate;
      },
      hold(): () => void {
        let release!: () => void;
        gate = new Promise((resolve) => {
          release = resolve;
        });
        return () => {
          gate = undefined;
          release();
        };
      },
      get running() {
        return running;
      },
      get maxRunning() {
        return maxRunning;
      },
    };
    return s;
  }

  async function until(what: string, check: () => Promise<boolean> | boolean): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (await check()) return;
      if (Date.now() > deadline) throw new Error(`${subject.name}: timed out waiting for ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  describe(`consumer contract: ${subject.name}`, () => {
    beforeAll(async () => {
      pool = new pg.Pool({ connectionString: subject.databaseUrl, max: 12 });
      pool.on('error', () => undefined); // an idle connection the server closed: the pool replaces it
      await migrate(pool, { schema });
      await pool.query(
        `CREATE TABLE "${schema}".effects (n bigserial, consumer text, event_id uuid, aggregate_id text, sequence int)`,
      );
    }, testTimeout);

    afterAll(async () => {
      await Promise.all(consumers.map((c) => c.stop().catch(() => undefined)));
      for (const namespace of namespaces) await subject.cleanup?.(namespace).catch(() => undefined);
      await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
      await pool?.end();
    }, testTimeout);

    it(
      'every event has exactly one effect when each is delivered twice to two instances running at once',
      async () => {
        const s = await scenario({ ordering: 'strict' });
        await s.start(0);
        await s.start(1);
        const events: OutboxMessage[] = [];
        for (let sequence = 1; sequence <= 3; sequence += 1)
          for (let a = 0; a < 10; a += 1) events.push(s.message(`agg-${a}`, sequence));
        // Each event twice in a row, then the whole lot again: copies land on either instance.
        await s.publish(...events.flatMap((m) => [m, m]));
        await s.publish(...events);
        await until('30 events applied and every copy handled', async () => {
          const copies = events.every(
            (m) => s.tally.count('processed', m.eventId) + s.tally.count('duplicate', m.eventId) >= 3,
          );
          return copies && (await s.applied()).length >= 30 && (await s.settled());
        });
        const applied = await s.applied();
        expect(applied).toHaveLength(30);
        expect(new Set(applied.map((e) => e.event_id)).size).toBe(30);
        for (const m of events) expect(s.tally.count('processed', m.eventId)).toBe(1);
        expect(s.tally.count('duplicate')).toBeGreaterThanOrEqual(60);
        expect(s.tally.count('quarantined') + s.tally.count('stale')).toBe(0);
        // Per aggregate, applied in sequence order (strict).
        for (let a = 0; a < 10; a += 1)
          expect(applied.filter((e) => e.aggregate_id === `agg-${a}`).map((e) => e.sequence)).toEqual([
            1, 2, 3,
          ]);
      },
      testTimeout,
    );

    it(
      'strict: a sequence that arrives before its predecessor is deferred, comes back, and is applied after it',
      async () => {
        const s = await scenario({ ordering: 'strict' });
        await s.start();
        const [m1, m2, m3] = [1, 2, 3].map((sequence) => s.message('x', sequence)) as [
          OutboxMessage,
          OutboxMessage,
          OutboxMessage,
        ];
        await s.publish(m1);
        await until('sequence 1 applied', async () => (await s.applied()).length === 1);
        await s.publish(m3);
        await until(
          'sequence 3 deferred twice (redelivered)',
          () => s.tally.count('deferred', m3.eventId) >= 2,
        );
        expect((await s.applied()).map((e) => e.sequence)).toEqual([1]);
        await s.publish(m2);
        await until(
          'the aggregate applied in order',
          async () => (await s.applied()).length === 3 && (await s.settled()),
        );
        expect((await s.applied()).map((e) => e.sequence)).toEqual([1, 2, 3]);
        expect(s.tally.count('processed', m3.eventId)).toBe(1);
      },
      testTimeout,
    );

    it(
      'skip-stale: an event older than the applied sequence is skipped and acknowledged',
      async () => {
        const s = await scenario({ ordering: 'skip-stale' });
        await s.start();
        await s.publish(s.message('y', 1), s.message('y', 2));
        await until('both applied', async () => (await s.applied()).length === 2);
        const old = s.message('y', 1); // another event claiming an older sequence
        await s.publish(old, s.message('y', 3));
        await until(
          'sequence 3 applied and the stale one settled',
          async () =>
            (await s.applied()).length === 3 && s.tally.handled(old.eventId) > 0 && (await s.settled()),
        );
        await pause(400); // a redelivery of the stale one would show up here
        expect(s.tally.results.get(old.eventId)).toEqual(['stale']);
        expect((await s.applied()).map((e) => e.sequence)).toEqual([1, 2, 3]);
      },
      testTimeout,
    );

    it(
      'an unaccepted schema version is quarantined once, with the reason, while other aggregates flow',
      async () => {
        // strict: the aggregate's next event waits behind the quarantined one and says so, at once
        // (a release puts both back, in order).
        const s = await scenario({
          ordering: 'strict',
          accepts: [{ type: 'contract.happened', schemaVersion: 1 }],
        });
        await s.start();
        const v2 = s.message('q', 1, { schemaVersion: 2 });
        const after = s.message('q', 2);
        const other = s.message('r', 1);
        await s.publish(v2, after, other);
        await until(
          'the other aggregate applied, the v2 and the event after it quarantined',
          async () =>
            (await s.applied()).some((e) => e.event_id === other.eventId) &&
            (await s.quarantined()).length >= 2 &&
            (await s.settled()),
        );
        await pause(400);
        const quarantined = await s.quarantined();
        const reasonOf = (id: string) => quarantined.find((q) => q.event_id === id)?.reason;
        expect(reasonOf(v2.eventId)).toMatch(/schema version 2/);
        expect(s.tally.results.get(v2.eventId)).toEqual(['quarantined']); // never redelivered
        expect(reasonOf(after.eventId)).toBe(`waiting behind quarantined event ${v2.eventId} (sequence 1)`);
        // Parked on its first delivery after the v2 was (one deferral at most, had it come first).
        const afterResults = s.tally.results.get(after.eventId) ?? [];
        expect(afterResults.at(-1)).toBe('quarantined');
        expect(afterResults.filter((r) => r === 'deferred').length).toBeLessThanOrEqual(1);
        expect((await s.applied()).map((e) => e.event_id)).toEqual([other.eventId]);
      },
      testTimeout,
    );

    it(
      'a failing handler is retried through redelivery, then quarantined after maxAttempts; others flow',
      async () => {
        const s = await scenario({ ordering: 'none', maxAttempts: 3 });
        s.failWhen((aggregateId) => aggregateId === 'boom');
        await s.start();
        const bad = s.message('boom', 1);
        const good = s.message('fine', 1);
        await s.publish(bad, good);
        await until(
          'the failing event quarantined',
          async () => (await s.quarantined()).length === 1 && (await s.settled()),
        );
        await pause(400);
        expect(s.tally.results.get(bad.eventId)).toEqual(['deferred', 'deferred', 'quarantined']);
        expect((await s.quarantined())[0]?.reason).toMatch(/refused boom on purpose/);
        expect((await s.applied()).map((e) => e.event_id)).toEqual([good.eventId]);
      },
      testTimeout,
    );

    it(
      'a message without a tx-outbox envelope is settled without a hot loop, and the events after it apply',
      async () => {
        const s = await scenario();
        await s.start();
        await subject.publishForeign(s.namespace);
        const m = s.message('f', 1);
        await s.publish(m);
        await until(
          'the event after it applied, everything settled',
          async () => (await s.applied()).length === 1 && (await s.settled()),
        );
        await pause(400);
        expect(await s.settled()).toBe(true);
        expect(s.tally.results.get(m.eventId)).toEqual(['processed']);
      },
      testTimeout,
    );

    it(
      'concurrency runs aggregates side by side and never reorders one aggregate',
      async () => {
        const s = await scenario({ ordering: 'none' }, true);
        await s.start(0, { concurrency: 4 });
        // Each aggregate's events back to back: a queue that ignored the key would run them at once.
        const events: OutboxMessage[] = [];
        for (let a = 0; a < 8; a += 1)
          for (let sequence = 1; sequence <= 15; sequence += 1) events.push(s.message(`c${a}`, sequence));
        await s.publish(...events);
        await until('120 applied', async () => (await s.applied()).length >= 120 && (await s.settled()));
        const applied = await s.applied();
        expect(applied).toHaveLength(120);
        for (let a = 0; a < 8; a += 1)
          expect(applied.filter((e) => e.aggregate_id === `c${a}`).map((e) => e.sequence)).toEqual(
            Array.from({ length: 15 }, (_, i) => i + 1),
          );
        expect(s.maxRunning).toBeGreaterThan(1);
        expect(s.maxRunning).toBeLessThanOrEqual(4);
      },
      testTimeout,
    );

    it(
      'stop() waits for the delivery being handled, is idempotent; a new instance resumes; an aborted signal stops',
      async () => {
        const s = await scenario();
        const first = await s.start();
        const release = s.hold();
        const m1 = s.message('s', 1);
        await s.publish(m1);
        await until('the handler running', () => s.running === 1);
        let stopped = false;
        const stopping = Promise.all([first.stop(), first.stop()]).then(() => {
          stopped = true;
        });
        await pause(200);
        expect(stopped).toBe(false); // still waiting for the handler
        release();
        await stopping;
        await first.stop();
        expect((await s.applied()).map((e) => e.event_id)).toEqual([m1.eventId]);
        expect(s.tally.results.get(m1.eventId)).toEqual(['processed']);

        const m2 = s.message('s', 2);
        await s.publish(m2);
        await pause(400);
        expect(await s.applied()).toHaveLength(1); // nobody consumes while stopped

        const controller = new AbortController();
        await s.start(0, { signal: controller.signal });
        await until(
          'the new instance applied what was published meanwhile',
          async () => (await s.applied()).length === 2 && (await s.settled()),
        );
        controller.abort();
        await pause(300);
        const m3 = s.message('s', 3);
        await s.publish(m3);
        await pause(400);
        expect((await s.applied()).map((e) => e.sequence)).toEqual([1, 2]);
        // m1 was acknowledged before the first instance closed: never handled again.
        expect(s.tally.handled(m1.eventId)).toBe(1);
      },
      testTimeout,
    );
  });
}
