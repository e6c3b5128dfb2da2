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
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { attributeHeader, envelopeHeaders } from '../envelope/bindings.js';
import type { InboxOptions } from '../inbox/inbox.js';
import type { OutboxMessage } from '../publishers/contract.js';
import { migrate } from '../schema/migrate.js';
import { SKIPPED_EVENT_TYPE } from '../skip-marker.js';
import {
  type ConsumerUnderTest,
  ContractRun,
  pause,
  scenario as runScenario,
  until as untilIn,
} from './consumer-scenario.js';
import { AWKWARD_IDS, PREVIOUS_IDS } from './envelopes.js';
import type { TestApi } from './publisher-contract.js';

export type { ConsumerSetup, ConsumerUnderTest, EnvelopeSender } from './consumer-scenario.js';

/** Matches `name` as a whole header name in a text (`headers.id:`, not `valid`). */
function naming(name: string): RegExp {
  return new RegExp(`(^|[^\\w-])${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}([^\\w-]|$)`, 'i');
}

export function consumerContract(api: TestApi, subject: ConsumerUnderTest): void {
  const { describe, it, expect, beforeAll, afterAll } = api;
  const ctx = new ContractRun(subject);
  const { schema, timeoutMs } = ctx;
  const testTimeout = timeoutMs * 3;
  const scenario = (inboxOptions: Partial<InboxOptions> = {}, jitter = false) =>
    runScenario(ctx, inboxOptions, jitter);
  const until = (what: string, check: () => Promise<boolean> | boolean) => untilIn(ctx, what, check);

  describe(`consumer contract: ${subject.name}`, () => {
    beforeAll(async () => {
      ctx.pool = new pg.Pool({ connectionString: subject.databaseUrl, max: 12 });
      ctx.pool.on('error', () => undefined); // an idle connection the server closed: the pool replaces it
      await migrate(ctx.pool, { schema });
      await ctx.pool.query(
        `CREATE TABLE "${schema}".effects (n bigserial, consumer text, event_id uuid, aggregate_id text, sequence int)`,
      );
    }, testTimeout);

    afterAll(async () => {
      await Promise.all(ctx.consumers.map((c) => c.stop().catch(() => undefined)));
      for (const namespace of ctx.namespaces) await subject.cleanup?.(namespace).catch(() => undefined);
      await ctx.pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
      await ctx.pool?.end();
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
      'strict: a skip marker (what `dead skip` publishes) is recorded as skipped, and the next event applied',
      async () => {
        const s = await scenario({ ordering: 'strict' });
        await s.start();
        const marker = s.message('k', 2, {
          type: SKIPPED_EVENT_TYPE,
          headers: {},
          payload: Buffer.from(
            JSON.stringify({
              skippedType: 'contract.happened',
              skippedSchemaVersion: 1,
              reason: 'contract',
              actor: 'ops',
              at: '',
            }),
          ),
        });
        await s.publish(s.message('k', 1), marker, s.message('k', 3));
        await until(
          'sequences 1 and 3 applied, the marker skipped',
          async () => (await s.applied()).length === 2 && s.tally.count('skipped', marker.eventId) === 1,
        );
        expect((await s.applied()).map((e) => e.sequence)).toEqual([1, 3]);
        expect(await s.quarantined()).toEqual([]);
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

    const sender = subject.envelope;
    if (sender !== undefined) {
      /** The envelope of `message` as the sender's binding carries it, as (name, value) pairs. */
      const pairsOf = (message: OutboxMessage): Array<readonly [string, string]> =>
        Object.entries(envelopeHeaders(message, 'contract', sender.binding));

      it(
        'a malformed or missing schema version, or a missing id, is refused naming the header (and the value), never handled as version 1',
        async () => {
          const s = await scenario({
            ordering: 'none',
            accepts: [{ type: 'contract.happened', schemaVersion: 1 }],
          });
          await s.start();
          const version = attributeHeader(sender.binding, 'schemaversion');
          const id = attributeHeader(sender.binding, 'id');
          /** The envelope with `header` set to `value`, or left out. */
          const altered = (m: OutboxMessage, header: string, value: string | undefined) =>
            pairsOf(m).flatMap(([name, v]): Array<readonly [string, string]> => {
              if (name !== header) return [[name, v]];
              return value === undefined ? [] : [[name, value]];
            });
          const cases: Array<{ readonly header: string; readonly value: string | undefined }> = [
            ...['two', '99999999999999999999', '-1', '1.5', '2147483648', undefined].map((value) => ({
              header: version,
              value,
            })),
            { header: id, value: undefined },
          ];
          const refused = cases.map((_, i) => s.message(`refused-${i}`, 1));
          for (const [i, m] of refused.entries())
            await sender.publish(s.namespace, m, altered(m, cases[i]!.header, cases[i]!.value));
          const after = s.message('refused-after', 1);
          await s.publish(after);
          await until(
            'the event after them applied, everything settled',
            async () => (await s.applied()).length >= 1 && (await s.settled()),
          );
          await pause(400);
          expect((await s.applied()).map((e) => e.event_id)).toEqual([after.eventId]);
          // Refused at the door: never handed to the inbox, so neither applied nor quarantined.
          for (const m of refused) expect(s.tally.handled(m.eventId)).toBe(0);
          expect(await s.quarantined()).toEqual([]);
          for (const { header, value } of cases) {
            const said = `headers.${header}: is ${value === undefined ? 'missing' : JSON.stringify(value)}`;
            const found = s.reasons().some((reason) => reason.includes(said));
            expect({ said, reasons: found ? 'one says it' : s.reasons() }).toEqual({
              said,
              reasons: 'one says it',
            });
          }
        },
        testTimeout,
      );

      it(
        'an envelope attribute sent twice is refused, neither value taken (order.placed, then order.cancelled)',
        async () => {
          const s = await scenario({ ordering: 'none' });
          await s.start();
          const typeHeader = attributeHeader(sender.binding, 'type');
          const idHeader = attributeHeader(sender.binding, 'id');
          const twice = (m: OutboxMessage, header: string, second: string) =>
            pairsOf(m).flatMap(
              (pair): Array<readonly [string, string]> =>
                pair[0] === header ? [pair, [header, second]] : [pair],
            );
          const types = s.message('dup-type', 1, { type: 'order.placed' });
          const ids = s.message('dup-id', 1);
          const otherId = randomUUID();
          await sender.publish(s.namespace, types, twice(types, typeHeader, 'order.cancelled'));
          await sender.publish(s.namespace, ids, twice(ids, idHeader, otherId));
          const after = s.message('dup-after', 1);
          await s.publish(after);
          await until(
            'the event after them applied, everything settled',
            async () => (await s.applied()).length >= 1 && (await s.settled()),
          );
          await pause(400);
          expect((await s.applied()).map((e) => e.event_id)).toEqual([after.eventId]);
          for (const id of [types.eventId, ids.eventId, otherId]) expect(s.tally.handled(id)).toBe(0);
          expect(s.reasons().length).toBeGreaterThanOrEqual(2);
          for (const header of [typeHeader, idHeader]) {
            const found = s.reasons().some((reason) => naming(header).test(reason));
            expect({ header, reasons: found ? 'one names it' : s.reasons() }).toEqual({
              header,
              reasons: 'one names it',
            });
          }
        },
        testTimeout,
      );
    }

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
      'reads the envelope tx-outbox 0.1 wrote mixed with the current one (a rolling upgrade), awkward ids exact, in order',
      async () => {
        const s = await scenario({ ordering: 'strict' });
        await s.start();
        // Ids 0.1 accepted, alternating old and new envelopes within each aggregate.
        for (let sequence = 1; sequence <= 4; sequence += 1) {
          const messages = PREVIOUS_IDS.map((id) => s.message(id, sequence));
          await (sequence % 2 === 1 ? s.publishPrevious(...messages) : s.publish(...messages));
        }
        // Ids only the current envelope carries (those both lists hold are aggregates above).
        const awkward = AWKWARD_IDS.filter((id) => !PREVIOUS_IDS.includes(id));
        for (let sequence = 1; sequence <= 2; sequence += 1)
          await s.publish(...awkward.map((id) => s.message(id, sequence)));
        const total = PREVIOUS_IDS.length * 4 + awkward.length * 2;
        await until(
          `${total} events applied`,
          async () => (await s.applied()).length >= total && (await s.settled()),
        );
        const applied = await s.applied();
        expect(applied).toHaveLength(total);
        for (const id of PREVIOUS_IDS)
          expect(applied.filter((e) => e.aggregate_id === id).map((e) => e.sequence)).toEqual([1, 2, 3, 4]);
        for (const id of awkward)
          expect(applied.filter((e) => e.aggregate_id === id).map((e) => e.sequence)).toEqual([1, 2]);
        expect(await s.quarantined()).toEqual([]);
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
