/**
 * The inbox's options, checked once where it is created (each error names the option and the
 * fix), and its statements in the consumer's schema.
 */
import type { Pool, PoolClient } from 'pg';
import { pgTransactions } from '../adapters/pg.js';
import type { TransactionRunner } from '../adapters/transactions.js';
import { OutboxValidationError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { MetricsOption } from '../metrics/resolve.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import { namedStatement, type Statement } from '../schema/statement.js';
import type { InboxTracingOptions } from '../tracing/process-span.js';
import type { AcceptedEvent } from './decode.js';
import {
  BLOCKER_SQL,
  CLAIM_AND_ADVANCE_SKIPPED_SQL,
  CLAIM_AND_ADVANCE_SQL,
  CLAIM_EVENT_SQL,
  COUNT_ATTEMPT_SQL,
  COUNT_DEFERRAL_SQL,
  DONE_QUARANTINE_SQL,
  LOCK_POSITION_SQL,
  QUARANTINE_SQL,
  RELEASED_MESSAGES_SQL,
  RELEASED_SQL,
} from './inbox-sql.js';
import { ORDERING_POLICIES, type OrderingPolicy, type StartSequence } from './ordering.js';

/**
 * The inbox's options. Exactly one of `pool` (node-postgres: the handler gets the PoolClient of the
 * transaction) and `transactions` (an ORM's runner, e.g. `transactions(db)` of `tx-outbox/drizzle`:
 * the handler gets the ORM's own transaction object, `Tx`).
 */
export interface InboxOptions<
  A extends readonly AcceptedEvent[] = readonly AcceptedEvent[],
  Tx = PoolClient,
> {
  /** The pg Pool of the consumer database. */
  readonly pool?: Pool;
  /**
   * Transactions through an ORM (src/adapters/transactions.ts), instead of `pool`: the handler's
   * first argument is the ORM's transaction, and its writes commit with the dedup record.
   */
  readonly transactions?: TransactionRunner<Tx>;
  /** This consumer's name: dedup records and positions are per consumer. */
  readonly consumer: string;
  readonly schema?: string;
  /** Default `strict`. */
  readonly ordering?: OrderingPolicy;
  /**
   * The (type, schema version) pairs this consumer understands; anything else is quarantined. Omit
   * to accept all. With a `schema` on each, the handler's `event.data` is typed from their outputs.
   */
  readonly accepts?: A;
  /** Handler failures before the message is quarantined. Default 5. */
  readonly maxAttempts?: number;
  /**
   * `strict`: the sequence an aggregate this consumer has not seen starts at. Default 1 (tx-outbox
   * sequences start there: a first event with a higher one waits, as a gap, for the ones before
   * it). `'first-seen'`: whatever sequence is delivered first starts it — for a consumer that
   * joins a stream with history it will never receive.
   */
  readonly startSequence?: StartSequence;
  /**
   * `strict`: how long a gap may stay unfilled without the aggregate advancing, in ms, before the
   * waiting event is quarantined. Only observed waiting counts (each interval between two
   * deferrals adds at most a minute: an outage does not). The clock restarts whenever the aggregate advances. Default
   * 300 000 (5 min: several consumer crashes, broker or database restarts in a row).
   */
  readonly maxGapMs?: number;
  /** @deprecated Use `maxGapMs` (the same limit; it now restarts when the aggregate advances). */
  readonly maxDeferMs?: number;
  /**
   * @deprecated Deliveries counted depend on the adapter's redelivery rate; use `maxGapMs`. If set,
   * a gap is also quarantined after this many deliveries without the aggregate advancing.
   */
  readonly maxDeferrals?: number;
  /** Run the per-event statement as a named prepared statement (default true). Turn off behind PgBouncer in transaction mode. */
  readonly prepared?: boolean;
  readonly logger?: Logger;
  /**
   * Where the inbox's metrics go (docs/metrics.md): a prom-client `Registry`, an OpenTelemetry
   * `{ meter }`, or `'otel'`. Constant label `consumer`. Default: none, nothing recorded.
   */
  readonly metrics?: MetricsOption;
  /** The `process` span of each delivery, when an OpenTelemetry tracer provider is registered (docs/tracing.md). */
  readonly tracing?: InboxTracingOptions;
}

export interface Statements {
  readonly claim: string;
  readonly claimAndAdvance: Statement;
  /** The same for a skip marker: the dedup record's outcome is `skipped`. */
  readonly claimAndAdvanceSkipped: string;
  readonly countAttempt: string;
  readonly countDeferral: string;
  readonly blocker: string;
  readonly lockPosition: string;
  readonly quarantine: string;
  readonly released: string;
  readonly releasedMessages: string;
  readonly doneQuarantine: string;
}

/**
 * Checks the options (nothing is connected yet); the runner every statement goes through, the
 * ordering policy and the statements.
 */
export function resolveInboxOptions<Tx>(options: InboxOptions<readonly AcceptedEvent[], Tx>): {
  runner: TransactionRunner<Tx>;
  ordering: OrderingPolicy;
  sql: Statements;
} {
  const runner = resolveRunner(options);
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
  for (const name of ['maxGapMs', 'maxDeferMs', 'maxDeferrals', 'maxAttempts'] as const) {
    const v = options[name];
    if (v !== undefined && !(Number.isSafeInteger(v) && v >= 1))
      throw new OutboxValidationError(name, `is ${String(v)}`, 'Use a positive integer.');
  }
  const schema = quoteSchema(options.schema ?? DEFAULT_SCHEMA);
  const sql: Statements = {
    claim: withSchema(CLAIM_EVENT_SQL, schema),
    claimAndAdvance: namedStatement(
      'txo_inbox',
      withSchema(CLAIM_AND_ADVANCE_SQL, schema),
      options.prepared ?? true,
    ),
    claimAndAdvanceSkipped: withSchema(CLAIM_AND_ADVANCE_SKIPPED_SQL, schema),
    countAttempt: withSchema(COUNT_ATTEMPT_SQL, schema),
    countDeferral: withSchema(COUNT_DEFERRAL_SQL, schema),
    blocker: withSchema(BLOCKER_SQL, schema),
    lockPosition: withSchema(LOCK_POSITION_SQL, schema),
    quarantine: withSchema(QUARANTINE_SQL, schema),
    released: withSchema(RELEASED_SQL, schema),
    releasedMessages: withSchema(RELEASED_MESSAGES_SQL, schema),
    doneQuarantine: withSchema(DONE_QUARANTINE_SQL, schema),
  };
  return { runner, ordering, sql };
}

/** `transactions`, or `pgTransactions(pool)`: exactly one of them. */
function resolveRunner<Tx>(options: InboxOptions<readonly AcceptedEvent[], Tx>): TransactionRunner<Tx> {
  const { pool, transactions } = options ?? {};
  if (pool !== undefined && transactions !== undefined) {
    throw new OutboxValidationError(
      'transactions',
      'was given together with `pool`',
      'Give one of them: `pool` for node-postgres, `transactions` for an ORM.',
    );
  }
  if (transactions !== undefined) {
    const t = transactions as Partial<TransactionRunner<Tx>> | null;
    if (
      t === null ||
      typeof t.transaction !== 'function' ||
      typeof t.errorCode !== 'function' ||
      typeof t.sql?.query !== 'function'
    ) {
      throw new OutboxValidationError(
        'transactions',
        'is not a transaction runner (transaction, sql, errorCode)',
        "Pass your ORM's runner, e.g. transactions(db) from 'tx-outbox/drizzle'.",
      );
    }
    return transactions;
  }
  if (!pool || typeof pool.connect !== 'function') {
    throw new OutboxValidationError(
      'pool',
      'is missing',
      "Pass the pg Pool of the consumer database, or `transactions` (your ORM's runner).",
    );
  }
  // Without `transactions`, Tx is PoolClient (its default): the type parameter says so.
  return pgTransactions(pool) as unknown as TransactionRunner<Tx>;
}
