/**
 * The relay contract's cases about what is delivered, in which order, and what is said about it:
 * `order`, `rollback`, `poison`, `history` (see relay-contract.ts).
 */
import { randomUUID } from 'node:crypto';
import { listDead, replayDead } from '../ops/dead-letter.js';
import { skipDead } from '../ops/dead-skip.js';
import { findEvent } from '../ops/find-event.js';
import { SKIPPED_EVENT_TYPE } from '../skip-marker.js';
import type { CaseKit } from './relay-checks.js';
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

export function deliveryCases({ relayCase, expect, locate, recorded }: CaseKit): void {
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
      const [replayed, skip] = await recorded(run, [p1Poison!, p2Poison!]);
      expect(replayed!.state).toBe('published');
      expect(replayed!.audit.map((a) => a.action)).toContain('replay');
      expect(skip!.state).toBe('published');
      expect(skip!.audit.map((a) => a.action)).toContain('skip');
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
      const where = await recorded(run, ids);
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
}
