/**
 * The backlog check (formerly test/failure/backlog.test.ts, moved out of the test suite to keep
 * it short): a backlog of `events` pending events over `aggregates` aggregates, written by
 * `enqueue` in transactions of 1,000, drained by one relay process (the built package) into a
 * fresh JetStream stream. It passes when the outbox ends empty (nothing left pending, nothing
 * dead) and the stream holds exactly `events` messages, each aggregate's sequences strictly
 * increasing in stream order: every event delivered exactly once, in per-aggregate order.
 * The drain rate is printed as a figure, never judged.
 */
import type pg from 'pg';
import { txOutboxSystem } from '../systems/tx-outbox.js';
import { type DrainRun, drainRun } from './drain.js';

export interface BacklogCheck {
  readonly events: number;
  readonly aggregates: number;
  readonly perSecond: number;
  readonly messages: number;
  readonly orderViolations: number;
  readonly ok: boolean;
}

export async function backlogCheck(
  pool: pg.Pool,
  options: { events: number; aggregates: number; payloadBytes: number; timeoutMs: number },
): Promise<BacklogCheck> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`the backlog was not drained within ${options.timeoutMs / 1000} s`)),
      options.timeoutMs,
    );
  });
  let run: DrainRun;
  try {
    run = await Promise.race([
      drainRun(
        pool,
        txOutboxSystem(),
        {
          events: options.events,
          aggregates: options.aggregates,
          payloadBytes: options.payloadBytes,
          relays: 1,
        },
        { checkOrder: true },
      ),
      deadline,
    ]);
  } finally {
    clearTimeout(timer);
  }
  const violations = run.orderViolations ?? Number.NaN;
  const messages = run.streamMessages ?? Number.NaN;
  return {
    events: options.events,
    aggregates: options.aggregates,
    perSecond: run.perSecond,
    messages,
    orderViolations: violations,
    ok: messages === options.events && violations === 0,
  };
}
