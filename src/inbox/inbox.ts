/**
 * The inbox: makes a consumer's effect happen once. `handle` records
 * (consumer, event id) and runs the handler's business writes in ONE transaction;
 * the broker is acknowledged by the caller only after it returns. Per-aggregate
 * ordering policies decide what an out-of-order delivery does; events of unknown
 * type or schema version, or that fail validation, are parked in quarantine with
 * the reason — never dropped silently, never retried in a hot loop.
 */
import type { Pool, PoolClient } from 'pg';
import { errorMessage, OutboxValidationError } from '../errors.js';
import { type Logger, silentLogger } from '../logger.js';
import { inTransaction, lostItsConnection } from '../producer/transaction.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import { namedStatement, type Statement } from '../schema/statement.js';
import {
  CLAIM_AND_ADVANCE_SQL,
  CLAIM_EVENT_SQL,
  COUNT_ATTEMPT_SQL,
  DONE_QUARANTINE_SQL,
  QUARANTINE_SQL,
  RELEASED_MESSAGES_SQL,
  RELEASED_SQL,
} from './inbox-sql.js';
import type { InboxMessage } from './message.js';
import { decideOrder, ORDERING_POLICIES, type OrderingPolicy, type StartSequence } from './ordering.js';

/** A Standard Schema validator (zod, valibot, arktype …), typed structurally. */
export interface StandardSchema<T = unknown> {
  readonly '~standard': {
    validate(
      value: unknown,
    ):
      | { value: T; issues?: undefined }
      | { issues: ReadonlyArray<{ message: string }> }
      | Promise<{ value: T; issues?: undefined } | { issues: ReadonlyArray<{ message: string }> }>;
  };
}

/** An event type this consumer understands, with the schema versions it accepts. */
export interface AcceptedEvent {
  readonly type: string;
  readonly schemaVersion: number | readonly number[];
  readonly schema?: StandardSchema;
}

export interface InboxOptions {
  readonly pool: Pool;
  /** This consumer's name: dedup records and positions are per consumer. */
  readonly consumer: string;
  readonly schema?: string;
  /** Default `strict`. */
  readonly ordering?: OrderingPolicy;
  /** The (type, schema version) pairs this consumer understands; anything else is quarantined. Omit to accept all. */
  readonly accepts?: readonly AcceptedEvent[];
  /** Handler failures before the message is quarantined. Default 5. */
  readonly maxAttempts?: number;
  /**
   * `strict`: the sequence an aggregate this consumer has not seen starts at. Default 1 (tx-outbox
   * sequences start there: a first event with a higher one waits, as a gap, for the ones before
   * it). `'first-seen'`: whatever sequence is delivered first starts it — for a consumer that
   * joins a stream with history it will never receive.
   */
  readonly startSequence?: StartSequence;
  /** `strict`: a gap defers the message; after this many deferrals or this long, it is quarantined. Defaults 50 and 10 min. */
  readonly maxDeferrals?: number;
  readonly maxDeferMs?: number;
  /** Run the per-event statement as a named prepared statement (default true). Turn off behind PgBouncer in transaction mode. */
  readonly prepared?: boolean;
  readonly logger?: Logger;
}

/** The event handed to the handler: the message plus its decoded payload. */
export interface InboxEvent<T = unknown> extends InboxMessage {
  /** The payload parsed as JSON (and validated, when the accepted event has a schema). */
  readonly data: T;
}

export type HandleStatus = 'processed' | 'duplicate' | 'stale' | 'deferred' | 'quarantined';

export interface HandleResult {
  readonly status: HandleStatus;
  /** Why it was deferred or quarantined. */
  readonly reason?: string;
  readonly error?: Error;
  /** Failed or deferred deliveries so far, when deferred. */
  readonly attempts?: number;
}

export type InboxHandler<T = unknown> = (tx: PoolClient, event: InboxEvent<T>) => Promise<unknown>;

export interface Inbox {
  readonly consumer: string;
  /** Handles one delivery; acknowledge the broker unless the result is `deferred`. */
  handle<T = unknown>(message: InboxMessage, handler: InboxHandler<T>): Promise<HandleResult>;
  /**
   * Hands released quarantined messages (`tx-outbox inbox release`) to the handler again, in
   * aggregate order; a released message skips the accepted-version check once. Returns what
   * happened to each.
   */
  replayReleased<T = unknown>(
    handler: InboxHandler<T>,
    options?: { limit?: number },
  ): Promise<HandleResult[]>;
  /** What `handle` answered since this inbox was created, per status (duplicates received, stale skipped …). */
  stats(): InboxStats;
}

export type InboxStats = Readonly<Record<HandleStatus, number>>;

interface Statements {
  readonly claim: string;
  readonly claimAndAdvance: Statement;
  readonly countAttempt: string;
  readonly quarantine: string;
  readonly released: string;
  readonly releasedMessages: string;
  readonly doneQuarantine: string;
}

class Rejected extends Error {
  constructor(
    readonly status: 'duplicate' | 'stale' | 'deferred' | 'quarantined',
    readonly reason?: string,
  ) {
    super(status);
  }
}

export function createInbox(options: InboxOptions): Inbox {
  if (!options?.pool || typeof options.pool.connect !== 'function') {
    throw new OutboxValidationError('pool', 'is missing', 'Pass the pg Pool of the consumer database.');
  }
  if (typeof options.consumer !== 'string' || options.consumer.trim() === '') {
    throw new OutboxValidationError('consumer', 'is missing', "Name the consumer, e.g. 'inventory'.");
  }
  const ordering = options.ordering ?? 'strict';
  if (!ORDERING_POLICIES.includes(ordering)) {
    throw new OutboxValidationError(
      'ordering',
      `is ${String(ordering)}`,
      `Use one of ${ORDERING_POLICIES.join(', ')}.`,
    );
  }
  const start = options.startSequence;
  if (start !== undefined && start !== 'first-seen' && !(Number.isSafeInteger(start) && start >= 1)) {
    throw new OutboxValidationError(
      'startSequence',
      `is ${String(start)}`,
      "Use a positive integer (tx-outbox sequences start at 1) or 'first-seen'.",
    );
  }
  const schema = quoteSchema(options.schema ?? DEFAULT_SCHEMA);
  const sql: Statements = {
    claim: withSchema(CLAIM_EVENT_SQL, schema),
    claimAndAdvance: namedStatement(
      'txo_inbox',
      withSchema(CLAIM_AND_ADVANCE_SQL, schema),
      options.prepared ?? true,
    ),
    countAttempt: withSchema(COUNT_ATTEMPT_SQL, schema),
    quarantine: withSchema(QUARANTINE_SQL, schema),
    released: withSchema(RELEASED_SQL, schema),
    releasedMessages: withSchema(RELEASED_MESSAGES_SQL, schema),
    doneQuarantine: withSchema(DONE_QUARANTINE_SQL, schema),
  };
  return new TransactionalInbox(options, ordering, sql);
}

class TransactionalInbox implements Inbox {
  readonly consumer: string;
  private readonly logger: Logger;
  private readonly maxAttempts: number;
  private readonly maxDeferrals: number;
  private readonly maxDeferMs: number;

  constructor(
    private readonly o: InboxOptions,
    private readonly ordering: OrderingPolicy,
    private readonly sql: Statements,
  ) {
    this.consumer = o.consumer;
    this.logger = o.logger ?? silentLogger;
    this.maxAttempts = o.maxAttempts ?? 5;
    this.maxDeferrals = o.maxDeferrals ?? 50;
    this.maxDeferMs = o.maxDeferMs ?? 600_000;
  }

  readonly #counts: Record<HandleStatus, number> = {
    processed: 0,
    duplicate: 0,
    stale: 0,
    deferred: 0,
    quarantined: 0,
  };

  stats(): InboxStats {
    return { ...this.#counts };
  }

  async handle<T>(message: InboxMessage, handler: InboxHandler<T>): Promise<HandleResult> {
    const result = await this.#handle(message, handler);
    this.#counts[result.status] += 1;
    return result;
  }

  async #handle<T>(message: InboxMessage, handler: InboxHandler<T>): Promise<HandleResult> {
    const decoded = await this.decode<T>(message);
    if ('reason' in decoded) return this.park(message, decoded.reason, 0);
    try {
      await inTransaction(
        this.o.pool,
        async (tx) => {
          const { rows } = await tx.query<{ last_sequence: string }>({
            ...this.sql.claimAndAdvance,
            values: [
              this.consumer,
              message.eventId,
              message.aggregateType,
              message.aggregateId,
              message.sequence,
            ],
          });
          if (rows.length === 0) throw new Rejected('duplicate');
          const seen = Number(rows[0]!.last_sequence);
          const last = seen === 0 ? undefined : seen;
          const start = this.o.startSequence ?? 1;
          const decision = decideOrder(this.ordering, last, message.sequence, start);
          if (decision === 'gap' && !(await this.isReleased(tx, message))) {
            const reason =
              last !== undefined
                ? `waiting for sequence ${last + 1} of this aggregate`
                : `waiting for sequence ${start} of this aggregate, the first this consumer would apply ` +
                  "(if it joined a stream whose earlier events it will never receive, set startSequence: 'first-seen')";
            throw new Rejected('deferred', reason);
          }
          if (decision === 'stale')
            throw new Rejected('stale', `sequence ${message.sequence} is not after ${last}`);
          await handler(tx, decoded.event);
        },
        // The ordering decision reads the position row it just locked: READ COMMITTED sees the
        // latest committed version (a stricter default isolation would fail instead of waiting).
        'BEGIN ISOLATION LEVEL READ COMMITTED',
      );
      return { status: 'processed' };
    } catch (error) {
      if (error instanceof Rejected) return this.rejected(message, error);
      // The database went away under the transaction: nothing was applied and the handler is not to
      // blame (no attempt charged); rejecting tells the adapter to redeliver.
      if (lostItsConnection(error)) throw error;
      return this.failed(message, error);
    }
  }

  async replayReleased<T>(
    handler: InboxHandler<T>,
    options: { limit?: number } = {},
  ): Promise<HandleResult[]> {
    const { rows } = await this.o.pool.query(this.sql.releasedMessages, [
      this.consumer,
      options.limit ?? 100,
    ]);
    const results: HandleResult[] = [];
    for (const r of rows) {
      const message: InboxMessage = {
        eventId: r.event_id,
        type: r.event_type,
        aggregateType: r.aggregate_type,
        aggregateId: r.aggregate_id,
        sequence: Number(r.sequence),
        schemaVersion: r.schema_version,
        headers: r.headers,
        payload: r.payload,
      };
      const result = await this.handle(message, handler);
      if (result.status !== 'deferred' && result.status !== 'quarantined') {
        await this.o.pool.query(this.sql.doneQuarantine, [r.id]);
      }
      results.push(result);
    }
    return results;
  }

  /** The transaction rolled back; a stale event's dedup record is then kept on its own. */
  private async rejected(message: InboxMessage, r: Rejected): Promise<HandleResult> {
    if (r.status === 'stale') {
      await inTransaction(this.o.pool, async (tx) => {
        await tx.query(this.sql.claim, [
          this.consumer,
          message.eventId,
          message.aggregateType,
          message.aggregateId,
          message.sequence,
          'stale',
        ]);
      });
      return { status: 'stale', ...(r.reason ? { reason: r.reason } : {}) };
    }
    if (r.status === 'deferred') {
      const { attempts, sinceFirstMs } = await this.count(message, r.reason ?? 'deferred');
      if (attempts >= this.maxDeferrals || sinceFirstMs >= this.maxDeferMs) {
        return this.park(message, `gap not filled after ${attempts} deliveries: ${r.reason}`, attempts);
      }
      return { status: 'deferred', reason: r.reason ?? 'deferred', attempts };
    }
    return { status: r.status, ...(r.reason ? { reason: r.reason } : {}) };
  }

  private async failed(message: InboxMessage, error: unknown): Promise<HandleResult> {
    const e = error instanceof Error ? error : new Error(String(error));
    const { attempts } = await this.count(message, `handler failed: ${errorMessage(e)}`.slice(0, 2000));
    if (attempts >= this.maxAttempts) {
      return this.park(message, `handler failed ${attempts} times: ${errorMessage(e)}`, attempts, e);
    }
    this.logger.warn(
      { consumer: this.consumer, eventId: message.eventId, attempts, err: e },
      'handler failed',
    );
    return { status: 'deferred', reason: `handler failed: ${errorMessage(e)}`, error: e, attempts };
  }

  private async count(
    message: InboxMessage,
    reason: string,
  ): Promise<{ attempts: number; sinceFirstMs: number }> {
    const { rows } = await this.o.pool.query<{ attempts: number; since_first_ms: string }>(
      this.sql.countAttempt,
      [this.consumer, message.eventId, reason],
    );
    return { attempts: rows[0]!.attempts, sinceFirstMs: Number(rows[0]!.since_first_ms) };
  }

  private async park(
    message: InboxMessage,
    reason: string,
    attempts: number,
    error?: Error,
  ): Promise<HandleResult> {
    await this.o.pool.query(this.sql.quarantine, [
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
    ]);
    this.logger.error({ consumer: this.consumer, eventId: message.eventId, reason }, 'message quarantined');
    return { status: 'quarantined', reason, ...(error ? { error } : {}) };
  }

  /** An operator released this message from quarantine: it skips the version check and a gap once. */
  private async isReleased(db: Pick<Pool, 'query'> | PoolClient, message: InboxMessage): Promise<boolean> {
    const { rowCount } = await db.query(this.sql.released, [this.consumer, message.eventId]);
    return (rowCount ?? 0) > 0;
  }

  /** Accepted type and version, JSON payload, schema validation. */
  private async decode<T>(message: InboxMessage): Promise<{ event: InboxEvent<T> } | { reason: string }> {
    const accepts = this.o.accepts;
    const accepted = accepts?.find((a) => a.type === message.type);

    if (accepts !== undefined) {
      const versions = accepted === undefined ? [] : ([] as number[]).concat(accepted.schemaVersion);
      if (!versions.includes(message.schemaVersion) && !(await this.isReleased(this.o.pool, message))) {
        return {
          reason:
            accepted === undefined
              ? `unknown event type "${message.type}" (schema version ${message.schemaVersion}): add it to accepts to handle it`
              : `schema version ${message.schemaVersion} of "${message.type}" is not accepted (accepts ${versions.join(', ')}): deploy a consumer that understands it, then release`,
        };
      }
    }
    let data: unknown;
    const contentType = message.headers['ce-datacontenttype'] ?? 'application/json';
    if (contentType === 'application/json') {
      try {
        data = JSON.parse(Buffer.from(message.payload).toString('utf8'));
      } catch (error) {
        return { reason: `payload is not valid JSON: ${errorMessage(error)}` };
      }
    } else {
      data = message.payload;
    }
    if (accepted?.schema) {
      const result = await accepted.schema['~standard'].validate(data);
      if (result.issues) {
        return {
          reason: `payload of "${message.type}" v${message.schemaVersion} fails validation: ${result.issues
            .map((i) => i.message)
            .join('; ')
            .slice(0, 1000)}`,
        };
      }
      data = result.value;
    }
    return { event: { ...message, data: data as T } };
  }
}
