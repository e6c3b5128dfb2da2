/**
 * The relay contract's cases about faults: `outage`, `fencing`, `stop`, `kill`, `restart` (see
 * relay-contract.ts).
 */
import { randomUUID } from 'node:crypto';
import { listDead } from '../ops/dead-letter.js';
import { type CaseKit, times } from './relay-checks.js';
import {
  allSeen,
  contractEvents,
  faultyPublisher,
  missing,
  orderViolations,
  pause,
  phantoms,
  until,
} from './relay-scenario.js';

export function faultCases({
  subject,
  relayCase,
  expect,
  locate,
  publishedOnce,
  published,
  recordedInHistory,
  proxy,
}: CaseKit): void {
  relayCase(
    'outage',
    'a broker outage charges no attempt; the events wait and then flow in order',
    async (run) => {
      const w = await run.watch();
      const relay = await run.relay();
      await relay.start();
      await run.produce(contractEvents(run.topic, 20, 10), 5);
      await until('the first events delivered', () => allSeen(run.committed, w.seen));
      await proxy().cut();
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
      await proxy().restore();
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
        () => `the other relay delivered all (${w.seen.length} seen, stats ${JSON.stringify(relay.stats())})`,
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
      // The aborted publish charged nothing: each of the rest published once, after one attempt.
      await publishedOnce(
        run,
        ids.filter((id) => !out.includes(id)),
        [relay.id],
      );
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
}
