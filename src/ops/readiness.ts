/**
 * Readiness of a relay process, judged in the background on an interval so that `/readyz`
 * answers from the last result and never does work per request: the database answers within
 * a time limit, the broker is reachable (from the relay's outage log), and the relay either
 * holds partitions or is a live standby (every partition is owned by a live relay).
 */

import type { Pool, PoolClient } from 'pg';
import { LOOP_ERRORS_NOT_READY, type RelayHealth } from '../core/relay-health.js';
import { errorMessage } from '../errors.js';
import type { Logger } from '../logger.js';
import { redactText } from '../redact.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { READINESS_PARTITIONS_SQL, READINESS_PING_SQL } from './readiness-sql.js';

/** The names of the checks, in the order they are reported. */
/** How often the checks run while not ready, ms. */
export const NOT_READY_RECHECK_MS = 500;

export const READINESS_CHECKS = ['database', 'relay', 'broker', 'partitions'] as const;
export type ReadinessCheckName = (typeof READINESS_CHECKS)[number];

/** One check's last result. */
export interface ReadinessCheck {
  readonly ok: boolean;
  /** What was found, for people: "holds 4 of 16 partitions", "unreachable: timeout after 500 ms". */
  readonly detail: string;
}

/** The cached result `/readyz` answers with. */
export interface ReadinessReport {
  readonly ready: boolean;
  /** When the checks last ran; undefined before the first run finished. */
  readonly checkedAt: Date | undefined;
  /** The checks that failed (empty when ready). */
  readonly failing: readonly ReadinessCheckName[];
  /** Every check run (the relay checks only when there is a relay). */
  readonly checks: Readonly<Partial<Record<ReadinessCheckName, ReadinessCheck>>>;
}

/** What the readiness check reads from a relay: its {@link RelayHealth}. */
export interface HealthSource {
  health(): RelayHealth;
}

export interface ReadinessOptions {
  /** The database the relay (or the process) works on. */
  readonly pool: Pool;
  /** The relay whose readiness is judged; without one, only the database is checked. */
  readonly relay?: HealthSource | undefined;
  /** Time limit of the database check, ms. */
  readonly timeoutMs: number;
  readonly logger: Logger;
  /** Called with each new report (sets the `tx_outbox_relay_ready` gauge). */
  readonly onReport?: ((report: ReadinessReport) => void) | undefined;
}

const NOT_RUN: ReadinessReport = Object.freeze({
  ready: false,
  checkedAt: undefined,
  failing: [],
  checks: {},
});

/** The database check's result. */
export interface DatabaseResult {
  readonly ok: boolean;
  readonly detail: string;
  /** Partitions without a live lease (with a relay only). */
  readonly unowned?: number;
  readonly total?: number;
}

/**
 * Runs the checks on demand ({@link check}) or on an interval ({@link start}), keeping the last
 * {@link report}. A check never throws: a failure is a failed check, logged when the readiness
 * changes. One check runs at a time; a tick that finds the previous one still running skips.
 */
export class ReadinessMonitor {
  #report: ReadinessReport = NOT_RUN;
  #running: Promise<ReadinessReport> | undefined;
  #timer: NodeJS.Timeout | undefined;
  /** A database check that outlived its time limit and has not settled yet (a pool exhausted, a hung server). */
  #late: Promise<unknown> | undefined;
  readonly #partitionsSql: string | undefined;

  constructor(private readonly o: ReadinessOptions) {
    const schema = o.relay?.health().schema;
    this.#partitionsSql =
      schema === undefined ? undefined : withSchema(READINESS_PARTITIONS_SQL, quoteSchema(schema));
  }

  /** The last result: not ready, with no checks, until the first run finished. */
  get report(): ReadinessReport {
    return this.#report;
  }

  /** Runs the checks now (or joins the run in progress) and returns the new report. */
  check(): Promise<ReadinessReport> {
    if (this.#running === undefined) {
      this.#running = this.#run().finally(() => {
        this.#running = undefined;
      });
    }
    return this.#running;
  }

  /**
   * Checks now and then every `intervalMs`, until {@link stop}; while not ready, every
   * {@link NOT_READY_RECHECK_MS} (a relay that just started, or a database back from an outage, is
   * ready as soon as it is, not an interval later). The timer does not keep the process alive.
   */
  start(intervalMs: number): void {
    if (this.#timer !== undefined) return;
    void this.check();
    let last = Date.now();
    this.#timer = setInterval(
      () => {
        if (this.#running !== undefined) return;
        if (this.report.ready && Date.now() - last < intervalMs) return;
        last = Date.now();
        void this.check();
      },
      Math.min(intervalMs, NOT_READY_RECHECK_MS),
    );
    this.#timer.unref();
  }

  /** Stops the interval and waits for a check in progress. */
  async stop(): Promise<void> {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#running;
  }

  async #run(): Promise<ReadinessReport> {
    let report: ReadinessReport;
    try {
      report = judge(await this.#database(), this.o.relay?.health());
    } catch (error) {
      // Not expected (every step catches), but a check must never take the process down.
      report = {
        ready: false,
        checkedAt: new Date(),
        failing: ['database'],
        checks: { database: { ok: false, detail: `check failed: ${redactText(errorMessage(error))}` } },
      };
    }
    this.#changed(report);
    this.#report = report;
    try {
      this.o.onReport?.(report);
    } catch (error) {
      this.o.logger.warn({ err: error }, 'readiness report callback failed');
    }
    return report;
  }

  /** Logs a change of readiness (or of the failing checks); silent while it stays the same. */
  #changed(next: ReadinessReport): void {
    const before = this.#report;
    const same =
      before.checkedAt !== undefined &&
      before.ready === next.ready &&
      before.failing.join() === next.failing.join();
    if (same) return;
    const relayId = this.o.relay?.health().relayId;
    if (next.ready) this.o.logger.info({ relayId }, 'ready');
    else {
      const failing = Object.fromEntries(next.failing.map((name) => [name, next.checks[name]?.detail]));
      this.o.logger.warn({ relayId, failing }, 'not ready');
    }
  }

  /** The database answers within the time limit; with a relay, also counts the unowned partitions. */
  async #database(): Promise<DatabaseResult> {
    // Never more than one connection request waiting: a hung check is not stacked on every tick.
    if (this.#late !== undefined) {
      return { ok: false, detail: 'unreachable: the previous check has not been answered yet' };
    }
    const sql = this.#partitionsSql ?? READINESS_PING_SQL;
    let timedOut = false;
    const work = (async (): Promise<DatabaseResult> => {
      let client: PoolClient | undefined;
      let failure: unknown;
      try {
        client = await this.o.pool.connect();
        const { rows } = await client.query<{ partitions?: number; unowned?: number }>(sql);
        const row = rows[0];
        if (this.#partitionsSql === undefined || row === undefined) return { ok: true, detail: 'reachable' };
        return { ok: true, detail: 'reachable', unowned: row.unowned ?? 0, total: row.partitions ?? 0 };
      } catch (error) {
        failure = error;
        return { ok: false, detail: `unreachable: ${redactText(errorMessage(error))}` };
      } finally {
        // A connection that failed or answered too late is not given back to the pool as good.
        client?.release(failure !== undefined || timedOut ? toError(failure) : undefined);
      }
    })();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<DatabaseResult>((resolve) => {
      timer = setTimeout(() => {
        timedOut = true;
        resolve({ ok: false, detail: `unreachable: no answer within ${this.o.timeoutMs} ms` });
      }, this.o.timeoutMs);
    });
    try {
      return await Promise.race([work, timeout]);
    } finally {
      clearTimeout(timer);
      if (timedOut) {
        const late = work.finally(() => {
          if (this.#late === late) this.#late = undefined;
        });
        this.#late = late;
      }
    }
  }
}

function toError(error: unknown): Error {
  return error instanceof Error ? error : new Error('readiness check answered too late');
}

/** The report from the database result and the relay's own state (pure: unit-tested). */
export function judge(database: DatabaseResult, relay: RelayHealth | undefined): ReadinessReport {
  const checks: Partial<Record<ReadinessCheckName, ReadinessCheck>> = {
    database: { ok: database.ok, detail: database.detail },
  };
  if (relay !== undefined) {
    checks.relay = !relay.running
      ? { ok: false, detail: 'not running (not started, or stopped)' }
      : relay.loopErrorsInARow >= LOOP_ERRORS_NOT_READY
        ? {
            ok: false,
            detail: `its loop failed ${relay.loopErrorsInARow} times in a row: ${relay.lastError ?? 'unknown error'}`,
          }
        : { ok: true, detail: `running as ${relay.relayId}` };
    checks.broker = brokerCheck(relay);
    checks.partitions = partitionsCheck(database, relay);
  }
  const failing = READINESS_CHECKS.filter((name) => checks[name]?.ok === false);
  return { ready: failing.length === 0, checkedAt: new Date(), failing, checks };
}

/**
 * The broker as the relay's publishes found it: unreachable (an outage), getting through (it
 * answered), or not known yet — failing while the first publish waits for an answer (a broker
 * that was never reachable answers nothing until the connect times out), passing while the
 * relay has published nothing at all (a standby, an empty outbox: nothing waits on the broker).
 */
function brokerCheck(relay: RelayHealth): ReadinessCheck {
  const name = relay.publisher;
  const since = relay.brokerUnavailableSince;
  if (since !== undefined) {
    return { ok: false, detail: `${name}: unreachable since ${since.toISOString()} (publishes refused)` };
  }
  if (relay.brokerAnswered ?? true) return { ok: true, detail: `${name}: publishes get through` };
  const waiting = relay.firstPublishWaitingSince;
  if (waiting !== undefined) {
    return {
      ok: false,
      detail: `${name}: not known yet: the first publish has had no answer since ${waiting.toISOString()}`,
    };
  }
  return { ok: true, detail: `${name}: not known yet: nothing published so far` };
}

function partitionsCheck(database: DatabaseResult, relay: RelayHealth): ReadinessCheck {
  if (relay.partitions > 0) {
    const of = database.total === undefined ? '' : ` of ${database.total}`;
    return { ok: true, detail: `holds ${relay.partitions}${of} partitions` };
  }
  if (database.unowned === undefined) {
    return { ok: false, detail: 'holds no partition, and whether others own them all is unknown' };
  }
  if (database.unowned === 0) {
    return { ok: true, detail: `live standby: all ${database.total} partitions are owned by live relays` };
  }
  return {
    ok: false,
    detail: `holds no partition while ${database.unowned} of ${database.total} have no live owner`,
  };
}
