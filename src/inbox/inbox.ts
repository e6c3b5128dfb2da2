/**
 * The inbox: makes a consumer's effect happen once. `handle` records
 * (consumer, event id) and runs the handler's business writes in ONE transaction;
 * the broker is acknowledged by the caller only after it returns. Per-aggregate
 * ordering policies decide what an out-of-order delivery does; events of unknown
 * type or schema version, or that fail validation, are parked in quarantine with
 * the reason — never dropped silently, never retried in a hot loop.
 */
import type { PoolClient } from 'pg';
import type { SqlExecutor, TransactionRunner } from '../adapters/transactions.js';
import { errorMessage } from '../errors.js';
import { type Logger, silentLogger } from '../logger.js';
import { type InboxMetrics, NOOP_INBOX_METRICS, SinkInboxMetrics } from '../metrics/inbox-metrics.js';
import { resolveMetrics } from '../metrics/resolve.js';
import { redactText } from '../redact.js';
import type { Statement } from '../schema/statement.js';
import { SKIPPED_EVENT_TYPE } from '../skip-marker.js';
import { ProcessTracing } from '../tracing/process-span.js';
import { type AcceptedData, type AcceptedEvent, decode, type InboxEvent } from './decode.js';
import { databaseFault, isAbortedTransaction } from './faults.js';
import { type InboxOptions, resolveInboxOptions, type Statements } from './inbox-options.js';
import type { InboxMessage } from './message.js';
import {
  DEFAULT_MAX_GAP_MS,
  decideOrder,
  expectedSequence,
  GAP_INTERVAL_CAP_MS,
  type GapBudget,
  gapExhausted,
  type OrderingPolicy,
} from './ordering.js';
import { booleanOf, bytesOf, jsonOf, numberOf, textOf } from './rows.js';

export type { AcceptedData, AcceptedEvent, InboxEvent, SchemaOutput, StandardSchema } from './decode.js';
export type { InboxOptions } from './inbox-options.js';

/**
 * What `handle` did. `skipped`: the message was the skip marker of an event an operator skipped
 * (`tx-outbox dead skip`): recorded, the aggregate's position moved past it, no handler ran.
 */
export type HandleStatus = 'processed' | 'duplicate' | 'stale' | 'deferred' | 'quarantined' | 'skipped';

export interface HandleResult {
  readonly status: HandleStatus;
  /** Why it was deferred or quarantined. */
  readonly reason?: string;
  readonly error?: Error;
  /**
   * When deferred: the handler's failures so far, or the deferrals on a gap since the aggregate last
   * advanced (the adapters' redelivery delay doubles with it).
   */
  readonly attempts?: number;
}

/**
 * Applies one event. `tx` is the inbox's transaction: the PoolClient with `pool`, the ORM's own
 * transaction object with `transactions` — write through it, and the writes commit with the
 * dedup record or roll back with it.
 */
export type InboxHandler<T = unknown, Tx = PoolClient> = (tx: Tx, event: InboxEvent<T>) => Promise<unknown>;

/**
 * An inbox whose handlers receive `event.data` of type `T` (from the `accepts` schemas) and the
 * transaction `Tx` (PoolClient, or the ORM's transaction with `transactions`). The methods' type
 * parameter narrows `T` further, when the caller knows more than the schemas say.
 */
export interface Inbox<T = unknown, Tx = PoolClient> {
  readonly consumer: string;
  /**
   * Handles one delivery; acknowledge the broker unless the result is `deferred`. Rejects, with
   * nothing written, when the database is unreachable or the transaction's connection broke
   * (redeliver later): a transient fault is never counted as a handler failure.
   */
  handle<D extends T = T>(message: InboxMessage, handler: InboxHandler<D, Tx>): Promise<HandleResult>;
  /**
   * Hands released quarantined messages (`tx-outbox inbox release`) to the handler again, in
   * aggregate order; a released message skips the accepted-version check (and a gap) once, the
   * messages parked behind it follow it and skip nothing. Returns what happened to each.
   */
  replayReleased<D extends T = T>(
    handler: InboxHandler<D, Tx>,
    options?: { limit?: number },
  ): Promise<HandleResult[]>;
  /** What `handle` answered since this inbox was created, per status (duplicates received, stale skipped …). */
  stats(): InboxStats;
}

export type InboxStats = Readonly<Record<HandleStatus, number>>;

/** A quarantined event a strict gap waits behind. */
interface Blocker {
  readonly eventId: string;
  readonly sequence: number;
  readonly released: boolean;
}

class Rejected extends Error {
  constructor(
    readonly status: 'duplicate' | 'stale' | 'deferred' | 'quarantined',
    readonly reason?: string,
    /** A gap: the sequence the aggregate stands at (0: none applied yet). */
    readonly gapAfter?: number,
    /** A gap: the first quarantined event between that sequence and this one. */
    readonly blocker?: Blocker,
  ) {
    super(status);
  }
}

/**
 * Creates the inbox of one consumer. The handler's `event.data` is typed from the `accepts`
 * schemas (their outputs' union; `unknown` when one has no schema); its transaction from
 * `transactions` (PoolClient with `pool`).
 */
export function createInbox<
  const A extends readonly AcceptedEvent[] = readonly AcceptedEvent[],
  Tx = PoolClient,
>(options: InboxOptions<A, Tx>): Inbox<AcceptedData<A>, Tx> {
  const { runner, ordering, sql } = resolveInboxOptions(options);
  return new TransactionalInbox<AcceptedData<A>, Tx>(options, runner, ordering, sql);
}

class TransactionalInbox<T, Tx> implements Inbox<T, Tx> {
  readonly consumer: string;
  private readonly logger: Logger;
  private readonly maxAttempts: number;
  private readonly gapBudget: GapBudget;
  private readonly metrics: InboxMetrics;
  readonly #tracing: ProcessTracing;

  constructor(
    private readonly o: InboxOptions<readonly AcceptedEvent[], Tx>,
    /** Every statement goes through it: `fn`'s executor inside a transaction, `sql` outside one. */
    private readonly runner: TransactionRunner<Tx>,
    private readonly ordering: OrderingPolicy,
    private readonly sql: Statements,
  ) {
    this.consumer = o.consumer;
    this.logger = o.logger ?? silentLogger;
    this.maxAttempts = o.maxAttempts ?? 5;
    this.gapBudget = {
      maxGapMs: o.maxGapMs ?? o.maxDeferMs ?? DEFAULT_MAX_GAP_MS,
      maxDeferrals: o.maxDeferrals,
    };
    const sink = resolveMetrics(o.metrics, { consumer: o.consumer }, this.logger);
    this.metrics = sink.enabled ? new SinkInboxMetrics(sink) : NOOP_INBOX_METRICS;
    this.#tracing = new ProcessTracing(o.consumer, o.tracing);
  }

  readonly #counts: Record<HandleStatus, number> = {
    processed: 0,
    duplicate: 0,
    stale: 0,
    deferred: 0,
    quarantined: 0,
    skipped: 0,
  };

  stats(): InboxStats {
    return { ...this.#counts };
  }

  async handle<D extends T>(message: InboxMessage, handler: InboxHandler<D, Tx>): Promise<HandleResult> {
    const result = await this.#tracing.around(message, () => this.#handle(message, handler));
    this.#counts[result.status] += 1;
    this.metrics.handled(result.status, message);
    return result;
  }

  async #handle<D>(message: InboxMessage, handler: InboxHandler<D, Tx>): Promise<HandleResult> {
    // A skip marker takes the event's place in its aggregate's order, under every policy, but has
    // nothing to decode and no handler to run: it is recorded as skipped.
    const marker = message.type === SKIPPED_EVENT_TYPE;
    const decoded = marker
      ? undefined
      : await decode<D>(this.o.accepts, message, () => this.isReleased(this.runner.sql, message));
    if (decoded !== undefined && 'reason' in decoded) return this.park(message, decoded.reason, 0);
    // Only what fails from the handler's call on is charged to it: before, the inbox's own
    // statements ran (a lock or statement timeout behind another instance, a pool timeout).
    let handlerRan = false;
    // What the ordering refused, kept here rather than recognised in what the runner rejects with:
    // a runner may wrap the error `fn` threw in its own.
    let refused: Rejected | undefined;
    const refuse = (r: Rejected): never => {
      refused = r;
      throw r;
    };
    try {
      // The runner opens READ COMMITTED: the ordering decision reads the position row it just
      // locked, and sees its latest committed version (a stricter isolation would fail instead of waiting).
      await this.runner.transaction(async (tx, sql) => {
        const { rows } = await sql.query<{ last_sequence: unknown }>({
          ...(marker ? { text: this.sql.claimAndAdvanceSkipped } : statement(this.sql.claimAndAdvance)),
          values: [
            this.consumer,
            message.eventId,
            message.aggregateType,
            message.aggregateId,
            message.sequence,
          ],
        });
        if (rows.length === 0) refuse(new Rejected('duplicate'));
        const seen = numberOf(rows[0]!.last_sequence);
        const last = seen === 0 ? undefined : seen;
        const start = this.o.startSequence ?? 1;
        const base = message.sequenceBase ?? 0;
        const decision = decideOrder(this.ordering, last, message.sequence, start, base);
        // A gap: behind a quarantined event it waits for that one, released or not; otherwise a
        // released message skips it once (the operator let the aggregate go past the hole).
        const blocker = decision === 'gap' ? await this.blocker(sql, message, seen) : undefined;
        if (decision === 'gap' && (blocker || !(await this.isReleased(sql, message)))) {
          const reason =
            last !== undefined || base > 0
              ? `waiting for sequence ${expectedSequence(last ?? 0, base)} of this aggregate`
              : `waiting for sequence ${start} of this aggregate, the first this consumer would apply ` +
                "(if it joined a stream whose earlier events it will never receive, set startSequence: 'first-seen')";
          refuse(new Rejected('deferred', reason, seen, blocker));
        }
        if (decision === 'stale')
          refuse(new Rejected('stale', `sequence ${message.sequence} is not after ${last}`));
        if (decoded === undefined) return;
        handlerRan = true;
        const started = this.metrics.handlerStarted();
        try {
          await handler(tx, decoded.event);
        } finally {
          this.metrics.handlerDone(started);
        }
      });
      return { status: marker ? 'skipped' : 'processed' };
    } catch (error) {
      if (refused !== undefined) return this.rejected(message, refused);
      // Before the handler ran, only the inbox's own statements failed (a lock or statement timeout
      // behind another instance, a pool timeout): nothing charged, the adapter redelivers.
      if (!handlerRan) throw error;
      // The handler caught a failed statement's error and returned: its failure, nothing committed.
      if (isAbortedTransaction(error)) return this.failed(message, error);
      // The database went away under the transaction, or the transaction lost a race (serialization
      // failure, deadlock): nothing was applied and the handler is not to blame (no attempt
      // charged); rejecting tells the adapter to redeliver. Any other error is the handler's.
      if (databaseFault(this.runner.errorCode(error)) !== undefined) throw error;
      return this.failed(message, error);
    }
  }

  async replayReleased<D extends T>(
    handler: InboxHandler<D, Tx>,
    options: { limit?: number } = {},
  ): Promise<HandleResult[]> {
    const limit = options.limit ?? 100;
    const results: HandleResult[] = [];
    // Each released message once per call; what a replayed one releases behind it comes next.
    const tried: string[] = [];
    while (results.length < limit) {
      const { rows } = await this.runner.sql.query<ReleasedRow>({
        text: this.sql.releasedMessages,
        values: [this.consumer, limit - results.length, tried],
      });
      if (rows.length === 0) break;
      for (const r of rows) {
        const id = textOf(r.id);
        tried.push(id);
        const headers = jsonOf<Record<string, string>>(r.headers) ?? {};
        const message: InboxMessage = {
          eventId: textOf(r.event_id),
          type: textOf(r.event_type),
          aggregateType: textOf(r.aggregate_type),
          aggregateId: textOf(r.aggregate_id),
          sequence: numberOf(r.sequence),
          sequenceBase: sequenceBaseHeader(headers),
          schemaVersion: numberOf(r.schema_version),
          contentType: headers['ce-datacontenttype'] ?? 'application/json',
          headers,
          payload: bytesOf(r.payload),
        };
        const result = await this.handle(message, handler);
        if (result.status !== 'deferred' && result.status !== 'quarantined') {
          await this.runner.sql.query({ text: this.sql.doneQuarantine, values: [id] });
        }
        results.push(result);
      }
    }
    return results;
  }

  /** The transaction rolled back; a stale event's dedup record is then kept on its own. */
  private async rejected(message: InboxMessage, r: Rejected): Promise<HandleResult> {
    if (r.status === 'stale') {
      // One statement, atomic on its own.
      await this.runner.sql.query({
        text: this.sql.claim,
        values: [
          this.consumer,
          message.eventId,
          message.aggregateType,
          message.aggregateId,
          message.sequence,
          'stale',
        ],
      });
      return { status: 'stale', ...(r.reason ? { reason: r.reason } : {}) };
    }
    if (r.status === 'deferred')
      return this.deferred(message, r.reason ?? 'deferred', r.gapAfter ?? 0, r.blocker);
    return { status: r.status, ...(r.reason ? { reason: r.reason } : {}) };
  }

  /**
   * A strict gap. Behind a quarantined event of its aggregate it is parked at once, saying so
   * (the release of that one releases it too). Otherwise it waits — its budget counted since the
   * aggregate last advanced — and is parked when the budget is spent.
   */
  private async deferred(
    message: InboxMessage,
    waiting: string,
    gapAfter: number,
    blocker: Blocker | undefined,
  ): Promise<HandleResult> {
    if (blocker && !blocker.released) return this.parkOnGap(message, gapAfter, waiting);
    const reason = blocker
      ? `waiting behind released event ${blocker.eventId} (sequence ${blocker.sequence}), which replayReleased applies first`
      : waiting;
    const { rows: counted } = await this.runner.sql.query<{ attempts: unknown; waited_ms: unknown }>({
      text: this.sql.countDeferral,
      values: [this.consumer, message.eventId, reason, gapAfter, GAP_INTERVAL_CAP_MS],
    });
    const attempts = numberOf(counted[0]!.attempts);
    const exhausted = gapExhausted(this.gapBudget, {
      waitedMs: numberOf(counted[0]!.waited_ms),
      deliveries: attempts,
    });
    if (exhausted === undefined) return { status: 'deferred', reason, attempts };
    if (!blocker)
      return this.parkOnGap(message, gapAfter, waiting, { reason: `${exhausted}: ${reason}`, attempts });
    return this.park(message, `${exhausted}: ${reason}`, attempts, undefined, {
      behind: blocker.eventId,
      released: `behind released event ${blocker.eventId}`,
    });
  }

  /**
   * Parks a strict gap's event under its aggregate's position lock, after looking again at what it
   * waits for: since its own transaction read them, a replay may have applied its blocker (the
   * aggregate moved: it is deferred instead, and comes back as the next one) or another instance
   * quarantined an event before it (it is parked behind that one, released with it).
   */
  private async parkOnGap(
    message: InboxMessage,
    gapAfter: number,
    waiting: string,
    exhausted?: { reason: string; attempts: number },
  ): Promise<HandleResult> {
    const parked = await this.runner.transaction(async (_tx, sql) => {
      const { rows } = await sql.query<{ last_sequence: unknown }>({
        text: this.sql.lockPosition,
        values: [this.consumer, message.aggregateType, message.aggregateId],
      });
      if (numberOf(rows[0]!.last_sequence) !== gapAfter) return undefined;
      const blocker = await this.blocker(sql, message, gapAfter);
      if (blocker?.released) return undefined;
      if (blocker) {
        const reason = `waiting behind quarantined event ${blocker.eventId} (sequence ${blocker.sequence})`;
        return this.park(message, reason, 0, undefined, { behind: blocker.eventId }, sql);
      }
      return exhausted
        ? this.park(message, exhausted.reason, exhausted.attempts, undefined, {}, sql)
        : undefined;
    });
    return parked ?? { status: 'deferred', reason: waiting };
  }

  /**
   * Charges the handler's failure: a connection error of its own calls included (ECONNREFUSED from
   * a service it calls, which the pg runner does not take for the database's).
   */
  private async failed(message: InboxMessage, error: unknown): Promise<HandleResult> {
    const e = error instanceof Error ? error : new Error(String(error));
    // The handler's error may quote an address it called, key and all: not into a row.
    const text = redactText(errorMessage(e));
    const { rows } = await this.runner.sql.query<{ attempts: unknown }>({
      text: this.sql.countAttempt,
      values: [this.consumer, message.eventId, `handler failed: ${text}`.slice(0, 2000)],
    });
    const attempts = numberOf(rows[0]!.attempts);
    if (attempts >= this.maxAttempts) {
      return this.park(message, `handler failed ${attempts} times: ${text}`, attempts, e);
    }
    this.logger.warn(
      { consumer: this.consumer, eventId: message.eventId, attempts, err: e },
      'handler failed',
    );
    return { status: 'deferred', reason: `handler failed: ${text}`, error: e, attempts };
  }

  private async park(
    message: InboxMessage,
    reason: string,
    attempts: number,
    error?: Error,
    place: { behind?: string; released?: string } = {},
    db: SqlExecutor = this.runner.sql,
  ): Promise<HandleResult> {
    await db.query({
      text: this.sql.quarantine,
      values: [
        this.consumer,
        message.eventId,
        message.aggregateType,
        message.aggregateId,
        message.sequence,
        message.type,
        message.schemaVersion,
        JSON.stringify(message.headers),
        Buffer.from(message.payload),
        reason,
        attempts,
        place.behind ?? null,
        place.released ?? null,
      ],
    });
    this.logger.error({ consumer: this.consumer, eventId: message.eventId, reason }, 'message quarantined');
    return { status: 'quarantined', reason, ...(error ? { error } : {}) };
  }

  /**
   * The first quarantined event of the message's aggregate between where the aggregate stands
   * (`gapAfter`; an unseen one just before its start: what is quarantined before that would be
   * stale, it holds nothing back) and the message.
   */
  private async blocker(
    sql: SqlExecutor,
    message: InboxMessage,
    gapAfter: number,
  ): Promise<Blocker | undefined> {
    const start = this.o.startSequence ?? 1;
    const stands = gapAfter !== 0 || start === 'first-seen' ? gapAfter : start - 1;
    const { rows } = await sql.query<{ event_id: unknown; sequence: unknown; released: unknown }>({
      text: this.sql.blocker,
      values: [this.consumer, message.aggregateType, message.aggregateId, stands, message.sequence],
    });
    const row = rows[0];
    return row === undefined
      ? undefined
      : {
          eventId: textOf(row.event_id),
          sequence: numberOf(row.sequence),
          released: booleanOf(row.released),
        };
  }

  /** An operator released this message from quarantine: it skips the version check and a gap once. */
  private async isReleased(sql: SqlExecutor, message: InboxMessage): Promise<boolean> {
    // Rows, not rowCount: an ORM's executor returns rows only.
    const { rows } = await sql.query({ text: this.sql.released, values: [this.consumer, message.eventId] });
    return rows.length > 0;
  }
}

/** A released quarantined message, as the driver under the runner returns it. */
interface ReleasedRow {
  readonly id: unknown;
  readonly event_id: unknown;
  readonly event_type: unknown;
  readonly aggregate_type: unknown;
  readonly aggregate_id: unknown;
  readonly sequence: unknown;
  readonly schema_version: unknown;
  readonly headers: unknown;
  readonly payload: unknown;
}

/** A named statement as a query: its name only when it has one (prepared). */
function statement(s: Statement): { text: string; name?: string } {
  return s.name === undefined ? { text: s.text } : { text: s.text, name: s.name };
}

/** The sequence base a quarantined message's stored headers carry (`ce-sequencebase`; absent: 0). */
function sequenceBaseHeader(headers: Readonly<Record<string, string>> | null): number {
  const text = headers?.['ce-sequencebase'];
  const base = text !== undefined && /^[0-9]+$/.test(text) ? Number(text) : 0;
  return Number.isSafeInteger(base) ? base : 0;
}
