/**
 * What the relay contract's cases are written with (the `CaseKit`): the case declaration (a
 * scratch schema per case, or the relay's declared reason for not honouring it) and the checks
 * through `findEvent`, the public face of the outbox and the delivery history.
 */
import type { EventLocation } from '../ops/find-event.js';
import { findEvent } from '../ops/find-event.js';
import type { TestApi } from './publisher-contract.js';
import {
  type RelayCase,
  RelayCaseRun,
  type RelayUnderTest,
  type SeenMessage,
  until,
} from './relay-scenario.js';
import type { TcpProxy } from './tcp-proxy.js';

/**
 * The runner, with `skip` for the cases a relay declares it cannot honour, and an `expect` that
 * takes a message (vitest's and jest-extended's do; a runner's that does not ignores it).
 */
export interface RelayTestApi extends Omit<TestApi, 'expect'> {
  skip?(name: string, fn: () => Promise<void>): void;
  // biome-ignore lint/suspicious/noExplicitAny: the runner's own expect, whatever its typing
  expect: (actual: unknown, message?: string) => any;
}

/** How often `id` was published. */
export const times = (seen: readonly SeenMessage[], id: string): number =>
  seen.filter((m) => m.eventId === id).length;

export interface CaseKit {
  readonly subject: RelayUnderTest;
  readonly expect: RelayTestApi['expect'];
  /** The proxy in front of the broker (cut and restored by `outage`; restored after every case). */
  proxy(): TcpProxy;
  /** Declares a case: run in a fresh schema and namespace, or reported with the relay's reason. */
  relayCase(name: RelayCase, title: string, body: (run: RelayCaseRun) => Promise<void>): void;
  /** Where each of `ids` is now. */
  locate(run: RelayCaseRun, ids: readonly string[]): Promise<EventLocation[]>;
  /**
   * Where each of `ids` is once the relay recorded it (published, or unknown where the relay
   * declared it keeps no history): the broker's acknowledgement comes before the statement that
   * records it, so this waits for it (10 s at most) and then answers whatever it finds.
   */
  recorded(run: RelayCaseRun, ids: readonly string[]): Promise<EventLocation[]>;
  /**
   * Every event of `ids` out of the outbox and, in the history, published once with no attempt
   * charged (attempts 1), by one of `relayIds` when given.
   */
  publishedOnce(run: RelayCaseRun, ids: readonly string[], relayIds?: readonly string[]): Promise<void>;
  /** Every event of `ids` out of the outbox (published, as far as the history tells). */
  published(run: RelayCaseRun, ids: readonly string[]): Promise<void>;
  /** Of the events `seen`, those the history finds published (their outcome recorded). */
  recordedInHistory(run: RelayCaseRun, seen: readonly SeenMessage[]): Promise<Set<string>>;
}

export function caseKit(api: RelayTestApi, subject: RelayUnderTest, proxy: () => TcpProxy): CaseKit {
  const { it, expect } = api;
  const timeoutMs = subject.timeoutMs ?? 60_000;

  const relayCase: CaseKit['relayCase'] = (name, title, body) => {
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
        const run = await new RelayCaseRun(subject, proxy().address).open();
        try {
          await body(run);
        } finally {
          await proxy().restore();
          await run.close();
        }
      },
      timeoutMs,
    );
  };

  const locate: CaseKit['locate'] = (run, ids) =>
    Promise.all(ids.map((id) => findEvent(run.pool, id, { schema: run.schema })));

  /**
   * A relay that declared it cannot keep the history (`cannot.history`) is held to what it does
   * record: a streamed event it kept no row for answers `unknown`, never `pending` or `dead`.
   */
  const finalStates =
    subject.features.cannot?.history === undefined ? ['published'] : ['published', 'unknown'];

  /**
   * Where each of `ids` is once the relay recorded it: an event the broker acknowledged is
   * recorded by the statement that follows, so this waits (10 s at most) for it.
   */
  const settledLocations = async (run: RelayCaseRun, ids: readonly string[]): Promise<EventLocation[]> => {
    let where: EventLocation[] = [];
    await until(
      'every event recorded',
      async () => {
        where = await locate(run, ids);
        return where.every((w) => finalStates.includes(w.state));
      },
      10_000,
    ).catch(() => undefined);
    return where;
  };

  return {
    subject,
    expect,
    proxy,
    relayCase,
    locate,
    recorded: settledLocations,
    async publishedOnce(run, ids, relayIds) {
      const where = await settledLocations(run, ids);
      expect(where.filter((w) => !finalStates.includes(w.state))).toEqual([]);
      for (const w of where) {
        if (w.state !== 'published') continue;
        expect(w.attempts, `attempts of ${w.event.eventId}`).toBe(1);
        expect(w.deliveries, `deliveries of ${w.event.eventId}`).toHaveLength(1);
        if (relayIds !== undefined) expect(relayIds).toContain(w.relayId);
      }
    },
    async published(run, ids) {
      const where = await settledLocations(run, ids);
      expect(where.filter((w) => !finalStates.includes(w.state))).toEqual([]);
    },
    async recordedInHistory(run, seen) {
      const ids = [...new Set(seen.map((m) => m.eventId))];
      const where = await locate(run, ids);
      return new Set(ids.filter((_, i) => where[i]!.state === 'published'));
    },
  };
}
