/**
 * One behaviour suite for every relay (the polling relay, the CDC relay in table mode and in WAL
 * mode), on a real PostgreSQL and a real broker, through the public API only: `enqueue`, the
 * relay's start/stop/stats, `findEvent`, `listDead`, `replayDead`, `skipDead`. Test-runner
 * agnostic like {@link publisherContract}: pass your runner's `describe`, `it`, `expect`,
 * `beforeAll`, `afterAll` (and `skip`, e.g. vitest's `it.skip`, for the cases a relay declares
 * it cannot honour).
 *
 *   relayContract({ describe, it, expect, beforeAll, afterAll, skip: it.skip }, {
 *     name: 'polling', features: { via: 'table', fence: '…' }, databaseUrl, broker,
 *     create: (options) => createRelay(options), spawn, restartDatabase,
 *   });
 *
 * Each case works in a scratch schema and a broker namespace of its own; the broker is reached
 * through a TcpProxy the suite can cut.
 */
import { randomUUID } from 'node:crypto';
import { listDead, replayDead } from '../ops/dead-letter.js';
import { skipDead } from '../ops/dead-skip.js';
import { type EventLocation, findEvent } from '../ops/find-event.js';
import { SKIPPED_EVENT_TYPE } from '../skip-marker.js';
import type { TestApi } from './publisher-contract.js';
import {
  allSeen,
  contractEvents,
  faultyPublisher,
  missing,
  orderViolations,
  pause,
  phantoms,
  type RelayCase,
  RelayCaseRun,
  type RelayUnderTest,
  type SeenMessage,
  until,
} from './relay-scenario.js';
import { TcpProxy } from './tcp-proxy.js';

export type {
  ChildMode,
  ChildRelayConfig,
  ChildReport,
  CommitMark,
  ContractRelay,
  RelayBroker,
  RelayCase,
  RelayChild,
  RelayFeatures,
  RelayUnderTest,
  SeenMessage,
} from './relay-scenario.js';
export { RELAY_CASES } from './relay-scenario.js';

/**
 * The runner, with `skip` for the cases a relay declares it cannot honour, and an `expect` that
 * takes a message (vitest's and jest-extended's do; a runner's that does not ignores it).
 */
export interface RelayTestApi extends Omit<TestApi, 'expect'> {
  skip?(name: string, fn: () => Promise<void>): void;
  // biome-ignore lint/suspicious/noExplicitAny: the runner's own expect, whatever its typing
  expect: (actual: unknown, message?: string) => any;
}

const times = (seen: readonly SeenMessage[], id: string): number =>
  seen.filter((m) => m.eventId === id).length;

export function relayContract(api: RelayTestApi, subject: RelayUnderTest): void {
  const { describe, it, expect, beforeAll, afterAll } = api;
  const timeoutMs = subject.timeoutMs ?? 60_000;
  let proxy: TcpProxy;

  /** A case in a fresh schema and namespace, or its declared reason when the relay cannot honour it. */
  const relayCase = (name: RelayCase, title: string, body: (run: RelayCaseRun) => Promise<void>): void => {
    const reason = subject.features.cannot?.[name];
    if (reason !== undefined) {
      const declared = `${name}: ${title} — not honoured by ${subject.name}: ${reason}`;
      if (api.skip) api.skip(declared, async () => undefined);
      else it(declared, async () => expect(reason.trim()).not.toBe(''));
      return;
    }
    it(
      `${name}: ${title}`,
      async () => {
        const run = await new RelayCaseRun(subject, proxy.address).open();
        try {
          await body(run);
        } finally {
          await proxy.restore();
          await run.close();
        }
      },
      timeoutMs,
    );
  };

  /** Where each of `ids` is now. */
  const locate = (run: RelayCaseRun, ids: readonly string[]): Promise<EventLocation[]> =>
    Promise.all(ids.map((id) => findEvent(run.pool, id, { schema: run.schema })));

  /**
   * Whether the relay keeps a delivery history for every event it publishes; one that declared
   * it cannot (`cannot.history`) is held to what it does record: a streamed event it kept no row
   * for answers `unknown`, never `pending` or `dead`.
   */
  const recordsHistory = subject.features.cannot?.history === undefined;

  const finalStates = recordsHistory ? ['published'] : ['published', 'unknown'];

  /**
   * Where each of `ids` is once the relay recorded it: an event the broker acknowledged is
   * recorded by the statement that follows, so this waits (a few seconds at most) for it.
   */
  const settledLocations = async (run: RelayCaseRun, ids: readonly string[]): Promise<EventLocation[]> => {
    let where: EventLocation[] = [];
    await until(
      () =>
        `every event recorded (${where.filter((w) => !finalStates.includes(w.state)).length} of ${ids.length} not yet)`,
      async () => {
        where = await locate(run, ids);
        return where.every((w) => finalStates.includes(w.state));
      },
      10_000,
    ).catch(() => undefined);
    return where;
  };

  /**
   * Every event of `ids` out of the outbox and, in the history, published once with no attempt
   * charged (attempts 1), by one of `relayIds` when given.
   */
  const publishedOnce = async (
    run: RelayCaseRun,
    ids: readonly string[],
    relayIds?: readonly string[],
  ): Promise<void> => {
    const where = await settledLocations(run, ids);
    expect(where.filter((w) => !finalStates.includes(w.state))).toEqual([]);
    for (const w of where) {
      if (w.state !== 'published') continue;
      expect(w.attempts, `attempts of ${w.event.eventId}`).toBe(1);
      expect(w.deliveries, `deliveries of ${w.event.eventId}`).toHaveLength(1);
      if (relayIds !== undefined) expect(relayIds).toContain(w.relayId);
    }
  };

  /** Every event of `ids` out of the outbox (published, as far as the history tells). */
  const published = async (run: RelayCaseRun, ids: readonly string[]): Promise<void> => {
    const where = await settledLocations(run, ids);
    expect(where.filter((w) => !finalStates.includes(w.state))).toEqual([]);
  };

  /** Of the events `seen`, those the history finds published (their outcome recorded). */
  const recordedInHistory = async (run: RelayCaseRun, seen: readonly SeenMessage[]): Promise<Set<string>> => {
    const ids = [...new Set(seen.map((m) => m.eventId))];
    const where = await locate(run, ids);
    return new Set(ids.filter((_, i) => where[i]!.state === 'published'));
  };

  describe(`relay contract: ${subject.name}`, () => {
    beforeAll(async () => {
      proxy = await TcpProxy.start(subject.broker.address);
    });
    afterAll(async () => {
      await proxy?.close();
    });

    relayCase(
      'order',
      'per-aggregate order under concurrency: 200 events, 20 aggregates, 4 producers',
      async (run) => {
        const w = await run.watch();
        const relay = await run.relay({ batchSize: 16 });
        await relay.start();
        await Promise.all(
          [0, 1, 2, 3].map((p) => run.produce(contractEvents(run.topic, 50, 20, { from: p * 50 }), 1 + p)),
        );
        expect(run.committed).toHaveLength(200);
        await until(
          () => `200 events delivered (${w.seen.length} seen, stats ${JSON.stringify(relay.stats())})`,
          () => allSeen(run.committed, w.seen),
        );
        expect(missing(run.committed, w.seen)).toEqual([]);
        expect(phantoms(run.committed, w.seen)).toEqual([]);
        expect(orderViolations(w.seen)).toEqual([]);
        expect(w.seen, 'a calm run publishes each event once').toHaveLength(200);
        expect(relay.stats().dead).toBe(0);
      },
    );

    relayCase('rollback', 'an event of a rolled-back transaction is never published', async (run) => {
      const w = await run.watch();
      const relay = await run.relay();
      await relay.start();
      const events = (from: number) => contractEvents(run.topic, 10, 5, { from });
      await run.produce(events(0), 5);
      const rolledBack = await run.produce(events(10), 5, true);
      await run.produce(events(20), 5);
      const rolledBackToo = await run.produce(events(30), 1, true);
      await run.produce(events(40), 2);
      await until('the committed events delivered', () => allSeen(run.committed, w.seen));
      // One more committed after everything, on every aggregate: once it is out, nothing is in flight.
      await run.produce(events(50), 10);
      await until('the last events delivered', () => allSeen(run.committed, w.seen));
      expect(rolledBack.length + rolledBackToo.length).toBe(20);
      const seenIds = new Set(w.seen.map((m) => m.eventId));
      expect([...rolledBack, ...rolledBackToo].filter((id) => seenIds.has(id))).toEqual([]);
      expect(phantoms(run.committed, w.seen)).toEqual([]);
      // The rolled-back sequences were given back: each aggregate runs 1 … 8 without a gap.
      expect(orderViolations(w.seen)).toEqual([]);
      expect(w.seen).toHaveLength(40);
    });

    relayCase(
      'poison',
      'a poison event goes dead without holding other aggregates; replay and skip release its aggregate in order',
      async (run) => {
        const w = await run.watch();
        let poisoned = true;
        const relay = await run.relay({ maxAttempts: 2 }, (p) =>
          faultyPublisher(p, { refuse: (m) => poisoned && m.type === 'contract.poison' }),
        );
        const one = (aggregateId: string, type = 'contract.happened') => ({
          aggregateType: 'contract',
          aggregateId,
          type,
          topic: run.topic,
          payload: { aggregateId },
        });
        // p1: 1 ok, 2 poison, 3, 4; p2: 1 poison, 2, 3; then 60 events of 10 other aggregates.
        const [, p1Poison, p1Three, p1Four] = await run.produce(
          [one('p1'), one('p1', 'contract.poison'), one('p1'), one('p1')],
          1,
        );
        const [p2Poison, ...p2Rest] = await run.produce(
          [one('p2', 'contract.poison'), one('p2'), one('p2')],
          1,
        );
        const others = await run.produce(contractEvents(run.topic, 60, 10, { prefix: 'o' }), 6);
        await relay.start();
        await until(
          () => `the other aggregates delivered and two events dead (${w.seen.length} seen)`,
          async () =>
            allSeen(others, w.seen) &&
            (await listDead(run.pool, { schema: run.schema })).length === 2 &&
            w.seen.some((m) => m.aggregateId === 'p1'),
        );
        const dead = await listDead(run.pool, { schema: run.schema });
        expect(dead.map((d) => d.eventId).sort()).toEqual([p1Poison!, p2Poison!].sort());
        expect(orderViolations(w.seen)).toEqual([]);
        // Held: a few polls later, nothing of p1 after 1 and nothing of p2 went out.
        await pause(500);
        expect(w.seen.filter((m) => m.aggregateId === 'p1').map((m) => m.sequence)).toEqual([1]);
        expect(w.seen.filter((m) => m.aggregateId === 'p2')).toEqual([]);
        const [deadOne, behind] = await locate(run, [p1Poison!, p1Three!]);
        expect(deadOne).toMatchObject({ state: 'dead', blocking: 2 });
        expect(behind!.state).toBe('pending');
        const waits = behind!.state === 'pending' ? behind!.waitingFor : [];
        expect(waits.find((wait) => wait.kind === 'behind')).toMatchObject({
          kind: 'behind',
          eventId: p1Poison,
          status: 'dead',
        });

        poisoned = false;
        expect(
          await replayDead(run.pool, { schema: run.schema, eventIds: [p1Poison!], reason: 'contract' }),
        ).toEqual([p1Poison]);
        await until('p1 released in order', () => allSeen([p1Poison!, p1Three!, p1Four!], w.seen));
        expect(w.seen.filter((m) => m.aggregateId === 'p1').map((m) => m.sequence)).toEqual([1, 2, 3, 4]);

        const skipped = await skipDead(run.pool, {
          schema: run.schema,
          eventIds: [p2Poison!],
          reason: 'contract',
        });
        expect(skipped.skipped).toEqual([p2Poison]);
        await until('p2 released in order', () => allSeen(p2Rest, w.seen));
        const p2 = w.seen.filter((m) => m.aggregateId === 'p2');
        expect(p2.map((m) => [m.sequence, m.type])).toEqual([
          [1, SKIPPED_EVENT_TYPE],
          [2, 'contract.happened'],
          [3, 'contract.happened'],
        ]);
        expect(orderViolations(w.seen)).toEqual([]);
        expect(await listDead(run.pool, { schema: run.schema })).toEqual([]);
        expect(
          missing(
            run.committed.filter((id) => id !== p2Poison),
            w.seen,
          ),
        ).toEqual([]);
        // The marker keeps the skipped event's id: `event <id>` finds it published, the skip audited.
        expect(p2[0]!.eventId).toBe(p2Poison);
        const [replayed, skip] = await locate(run, [p1Poison!, p2Poison!]);
        expect(replayed!.state).toBe('published');
        expect(replayed!.audit.map((a) => a.action)).toContain('replay');
        expect(skip!.state).toBe('published');
        expect(skip!.audit.map((a) => a.action)).toContain('skip');
      },
    );

    relayCase(
      'outage',
      'a broker outage charges no attempt; the events wait and then flow in order',
      async (run) => {
        const w = await run.watch();
        const relay = await run.relay();
        await relay.start();
        await run.produce(contractEvents(run.topic, 20, 10), 5);
        await until('the first events delivered', () => allSeen(run.committed, w.seen));
        await proxy.cut();
        const during = await run.produce(contractEvents(run.topic, 60, 10, { from: 20 }), 6);
        await until(
          () => `a publish refused as unreachable (stats ${JSON.stringify(relay.stats())})`,
          () => relay.stats().unavailable > 0,
        );
        // Past the first refusal and a few more rounds: nothing charged, nothing dead.
        await pause(800);
        for (const where of await locate(run, during)) {
          expect(where.state).not.toBe('dead');
          if (where.state === 'pending') expect(where.attempts).toBe(0);
        }
        expect(relay.stats().dead).toBe(0);
        await proxy.restore();
        await until(
          () => `the backlog delivered after the outage (stats ${JSON.stringify(relay.stats())})`,
          () => allSeen(run.committed, w.seen),
          30_000,
        );
        expect(missing(run.committed, w.seen)).toEqual([]);
        expect(orderViolations(w.seen)).toEqual([]);
        expect(relay.stats().dead).toBe(0);
        expect(relay.health().running).toBe(true);
        await publishedOnce(run, run.committed, [relay.id]);
      },
    );

    relayCase(
      'fencing',
      `a relay paused past its lease changes nothing after it resumes (${subject.features.fence})`,
      async (run) => {
        const w = await run.watch();
        const ids = await run.produce(contractEvents(run.topic, 40, 40), 10);
        const pausedId = `paused-${randomUUID().slice(0, 6)}`;
        const paused = run.child({ kind: 'slow-fail', delayMs: 1500 }, pausedId);
        await paused.until('publishing', 30_000);
        paused.pause();
        // Its leases run out; another relay takes over and holds its first publish until released,
        // so the events are still to be settled when the paused relay resumes.
        let release!: () => void;
        const released = new Promise<void>((resolve) => {
          release = resolve;
        });
        let calls = 0;
        const relay = await run.relay({}, (p) =>
          faultyPublisher(p, { gate: () => released, onPublish: () => void calls++ }),
        );
        await relay.start();
        await until(
          () => `the other relay publishing (stats ${JSON.stringify(relay.stats())})`,
          () => calls > 0,
          30_000,
        );
        paused.resume();
        // Its publisher now answers its batch with permanent failures: unfenced, they would go dead.
        await paused.until('refused');
        await pause(1000);
        expect(await listDead(run.pool, { schema: run.schema })).toEqual([]);
        for (const where of await locate(run, ids)) {
          expect(where.state).not.toBe('dead');
          if (where.state === 'pending') expect(where.attempts).toBe(0);
        }
        release();
        await until(
          () =>
            `the other relay delivered all (${w.seen.length} seen, stats ${JSON.stringify(relay.stats())})`,
          () => allSeen(ids, w.seen),
          30_000,
        );
        // Published once each, by the relay that took over or (polling relays share the
        // partitions again) by the resumed one, never by its fenced batch.
        await publishedOnce(run, ids, [relay.id, pausedId]);
        // Both alive, the schema goes on working: the next events flow, in order, once.
        await run.produce(contractEvents(run.topic, 20, 10, { from: 40 }), 5);
        await until('the next events delivered', () => allSeen(run.committed, w.seen), 30_000);
        expect(orderViolations(w.seen)).toEqual([]);
        expect(phantoms(run.committed, w.seen)).toEqual([]);
        expect(await listDead(run.pool, { schema: run.schema })).toEqual([]);
      },
    );

    relayCase(
      'stop',
      'stop({ timeout }) drains the batch in flight, then publishes nothing; its deadline aborts a hung publish',
      async (run) => {
        const w = await run.watch();
        let inFlight = 0;
        const slow = await run.relay({ batchSize: 10 }, (p) =>
          faultyPublisher(p, { delayMs: () => 400, onPublish: () => void inFlight++ }),
        );
        // One event per transaction: a CDC relay confirms its slot by whole transactions, so the
        // events of a transaction that stop() cut in two would all stream again (at least once).
        const ids = await run.produce(contractEvents(run.topic, 60, 60), 1);
        await slow.start();
        await until('a publish in flight', () => inFlight > 0);
        await slow.stop({ timeout: 10_000 });
        const atStop = w.seen.length;
        expect(atStop, 'the batch in flight was published').toBeGreaterThan(0);
        expect(atStop).toBeLessThan(60);
        expect(slow.health().running).toBe(false);
        await pause(400);
        expect(w.seen.length, 'nothing published after stop() resolved').toBe(atStop);
        // What went out was recorded: findEvent says published, and no relay publishes it again.
        const out = w.seen.map((m) => m.eventId);
        await publishedOnce(run, out, [slow.id]);

        // A publish hanging past the deadline is aborted: stop() returns in time, nothing charged.
        let hung = 0;
        const stuck = await run.relay({ batchSize: 10 }, (p) =>
          faultyPublisher(p, { delayMs: () => 60_000, onPublish: () => void hung++ }),
        );
        await stuck.start();
        await until('a hung publish', () => hung > 0);
        const started = Date.now();
        await stuck.stop({ timeout: 300 });
        expect(Date.now() - started).toBeLessThan(5_000);

        const relay = await run.relay();
        await relay.start();
        await until('the rest delivered by a new relay', () => allSeen(ids, w.seen), 30_000);
        expect(orderViolations(w.seen)).toEqual([]);
        expect(
          out.filter((id) => times(w.seen, id) > 1),
          'drained events published again',
        ).toEqual([]);
        expect(await listDead(run.pool, { schema: run.schema })).toEqual([]);
        await published(run, ids);
      },
    );

    relayCase(
      'kill',
      'kill -9 mid-stream: nothing lost, nothing recorded published again, the unrecorded batch republished',
      async (run) => {
        const w = await run.watch();
        // The child holds each publish 40 ms while it reads on: the kill finds events read and not
        // settled, a batch the broker acknowledged and the relay never recorded, and earlier
        // deliveries recorded (CDC: confirmed) under status updates every 200 ms.
        const child = run.child(
          { kind: 'kill-after-publish', afterBatches: 8, delayMs: 40 },
          `killed-${randomUUID().slice(0, 6)}`,
          25,
        );
        await child.until('started', 30_000);
        const producing = run.produce(contractEvents(run.topic, 2000, 200), 25);
        const killing = await child.until('killing', 30_000);
        expect((await child.exited()).signal).toBe('SIGKILL');
        const atKill = w.seen.length;
        await producing;
        const recorded = await (subject.recorded
          ? subject.recorded(run.pool, run.schema, run.commits)
          : recordedInHistory(run, w.seen.slice(0, atKill)));
        expect(atKill, 'killed mid-stream').toBeLessThan(run.committed.length);
        expect(recorded.size, 'deliveries recorded before the kill').toBeGreaterThan(0);
        expect(killing.ids!.length).toBeGreaterThan(0);
        expect(killing.ids!.filter((id) => recorded.has(id))).toEqual([]);
        // More committed while no relay runs.
        await run.produce(contractEvents(run.topic, 200, 200, { from: 2000 }), 25);

        const relay = await run.relay({ batchSize: 100 });
        await relay.start();
        await until(
          () =>
            `everything delivered after the kill (${w.seen.length} seen, stats ${JSON.stringify(relay.stats())})`,
          () => allSeen(run.committed, w.seen),
          40_000,
        );
        expect(missing(run.committed, w.seen)).toEqual([]);
        expect(phantoms(run.committed, w.seen)).toEqual([]);
        expect(orderViolations(w.seen)).toEqual([]);
        // The batch the broker had acknowledged when the process died was never recorded: again.
        expect(killing.ids!.filter((id) => times(w.seen, id) < 2)).toEqual([]);
        // What was recorded before the kill never comes again.
        expect([...recorded].filter((id) => times(w.seen, id) > 1)).toEqual([]);
        expect(relay.stats().dead).toBe(0);
        expect(relay.health().running).toBe(true);
        // `event <id>` (a scan of the outbox each): the republished batch and every 25th event.
        await published(run, [...killing.ids!, ...run.committed.filter((_, i) => i % 25 === 0)]);
      },
    );

    relayCase(
      'restart',
      'PostgreSQL restarted mid-stream (fast, then immediate): recovered without exiting, nothing lost',
      async (run) => {
        const restart = subject.restartDatabase;
        if (!restart) throw new Error(`${subject.name}: restartDatabase() is needed for this case`);
        const w = await run.watch();
        // 40 ms per publish: the restarts land while the relay is publishing.
        const relay = await run.relay({}, (p) => faultyPublisher(p, { delayMs: () => 40 }));
        await relay.start();
        for (const [round, mode] of (['fast', 'immediate'] as const).entries()) {
          const seen = w.seen.length;
          await run.produce(contractEvents(run.topic, 200, 20, { from: round * 200 }), 20);
          await until('publishing under way', () => w.seen.length >= seen + 40);
          await restart(mode);
        }
        await run.produce(contractEvents(run.topic, 100, 20, { from: 400 }), 20);
        await until(
          () =>
            `everything delivered after the restarts (${w.seen.length} seen, stats ${JSON.stringify(relay.stats())})`,
          () => allSeen(run.committed, w.seen),
          40_000,
        );
        expect(relay.health().running).toBe(true);
        expect(missing(run.committed, w.seen)).toEqual([]);
        expect(phantoms(run.committed, w.seen)).toEqual([]);
        expect(orderViolations(w.seen)).toEqual([]);
        expect(relay.stats().dead).toBe(0);
      },
    );

    relayCase(
      'history',
      'the delivery history and findEvent (`tx-outbox event <id>`) answer for every event',
      async (run) => {
        const w = await run.watch();
        const relay = await run.relay();
        await relay.start();
        const ids = await run.produce(contractEvents(run.topic, 12, 4), 4);
        await until('delivered', () => allSeen(ids, w.seen));
        const where = await locate(run, ids);
        for (const [i, loc] of where.entries()) {
          expect(loc).toMatchObject({
            state: 'published',
            relayId: relay.id,
            attempts: 1,
            event: {
              eventId: ids[i],
              aggregateType: 'contract',
              aggregateId: `a${i % 4}`,
              sequence: Math.floor(i / 4) + 1,
            },
          });
          if (loc.state === 'published') expect(loc.deliveries).toHaveLength(1);
        }
        expect((await findEvent(run.pool, randomUUID(), { schema: run.schema })).state).toBe('unknown');
      },
    );
  });
}
