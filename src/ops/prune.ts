/**
 * Pruning: keeps the auxiliary tables bounded by configuration, not by history
 * (docs/schema.md, Bounded tables). Idle, fully delivered aggregates lose their
 * `aggregate_sequences` and `aggregate_progress` rows after the sequence floor was
 * raised above them (a re-created aggregate continues above every sequence it had);
 * aggregates on caller versions, which have no sequence row, lose their progress row once
 * idle as long with nothing of them left in events (the gap bridge resumes them);
 * dead relays' rows, old audit rows and, when asked, the inbox's old dedup records,
 * idle positions, stale attempt counts and released quarantine rows go too. Events —
 * pending or dead — are never touched.
 *
 * One pruner per schema (an advisory lock); every delete is a bounded batch in a short
 * transaction of its own that skips locked rows, repeated until nothing is left or the
 * time budget is spent.
 */
import type { Pool, PoolClient } from 'pg';
import { aggregateKeyOf } from '../aggregate-key.js';
import { OutboxValidationError } from '../errors.js';
import { MAX_PRUNE_WINDOW_MS } from '../inbox/quarantine.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import {
  type AgedTable,
  AUDIT,
  COUNT_IDLE_AGGREGATES_SQL,
  COUNT_IDLE_POSITIONS_SQL,
  COUNT_IDLE_PROGRESS_SQL,
  countAgedSql,
  DELETE_AGGREGATES_SQL,
  DELETE_POSITIONS_SQL,
  DELETE_PROGRESS_SQL,
  deleteAgedSql,
  FLOOR_SQL,
  IDLE_AGGREGATES_SQL,
  IDLE_POSITIONS_SQL,
  IDLE_PROGRESS_SQL,
  INBOX,
  INBOX_ATTEMPTS,
  INBOX_RELEASED,
  PROGRESS_IN_USE_SQL,
  RAISE_FLOOR_SQL,
  RELAYS,
  TRY_LOCK_SQL,
  UNLOCK_SQL,
  WINDOW_END_SQL,
} from './prune-sql.js';

const DAY = 86_400_000;

/** The tables `prune` removes rows from (`inbox_quarantine`: released messages only). */
export const PRUNED_TABLES = [
  'aggregate_sequences',
  'aggregate_progress',
  'relays',
  'audit',
  'inbox',
  'inbox_positions',
  'inbox_attempts',
  'inbox_quarantine',
] as const;
export type PrunedTable = (typeof PRUNED_TABLES)[number];

/** Inbox pruning. Keep `replayHorizonMs` ≤ `dedupRetentionMs` ≤ `positionRetentionMs`. */
export interface InboxPruneOptions {
  /** How far back a broker may still redeliver (stream retention, a group reset …). Required. */
  readonly replayHorizonMs: number;
  /** Dedup records (`inbox`) older than this go (D). Default 7 days; at least the replay horizon. */
  readonly dedupRetentionMs?: number;
  /**
   * Positions (`inbox_positions`) untouched this long go (R_c). Default 14 days; at least the
   * dedup retention and, when this call prunes aggregates too, above `aggregateRetentionMs`.
   */
  readonly positionRetentionMs?: number;
  /** Failed-attempt counts (`inbox_attempts`) not updated this long go. Default 7 days. */
  readonly attemptRetentionMs?: number;
  /** Released quarantine rows the consumer never replayed go this long after release. Default 7 days. */
  readonly releasedRetentionMs?: number;
}

export interface PruneOptions {
  /** Outbox schema. Default `outbox`. */
  readonly schema?: string;
  /** Count what would go, delete nothing. Default false. */
  readonly dryRun?: boolean;
  /**
   * An aggregate last written this long ago, with everything delivered, loses its sequence and
   * progress rows (R_p). Default 7 days, at least 1 minute. Keep it above the longest consumer lag.
   * An aggregate on caller versions (no sequence row) loses its progress row once the relay last
   * recorded it this long ago, nothing of it left in events.
   * `false`: leave the aggregates alone.
   */
  readonly aggregateRetentionMs?: number | false;
  /** Relays whose heartbeat is this old lose their row. Default 1 day; `false`: keep them. */
  readonly relayRetentionMs?: number | false;
  /** Audit rows older than this go. Default 365 days; `false`: keep the audit trail. */
  readonly auditRetentionMs?: number | false;
  /** Prune the inbox tables of this schema too (default: no). */
  readonly inbox?: InboxPruneOptions | false;
  /** Rows per batch (each its own transaction). Default 1000. */
  readonly batchSize?: number;
  /** Stop starting batches after this long, ms. Default 30000. */
  readonly budgetMs?: number;
}

export interface PruneResult {
  /** Rows removed per table (with `dryRun`: rows that would be). */
  readonly removed: Readonly<Record<PrunedTable, number>>;
  readonly dryRun: boolean;
  /** False when another pruner of the schema was running: this call did nothing. */
  readonly ran: boolean;
  /** False when the time budget ran out before every table was done. */
  readonly complete: boolean;
  /** The sequence floor after the run: re-created aggregates start above it. */
  readonly floor: number;
}

interface Resolved {
  readonly schema: string;
  readonly quoted: string;
  readonly dryRun: boolean;
  readonly aggregateMs: number | false;
  readonly relayMs: number | false;
  readonly auditMs: number | false;
  readonly inbox: Required<InboxPruneOptions> | false;
  readonly batchSize: number;
  readonly budgetMs: number;
}

function duration(value: unknown, field: string, fallback: number, min = 1): number {
  const v = value ?? fallback;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > MAX_PRUNE_WINDOW_MS) {
    throw new OutboxValidationError(
      field,
      `is ${String(v)}`,
      `Pass whole milliseconds from ${min} to ${MAX_PRUNE_WINDOW_MS} (100 years).`,
    );
  }
  return v;
}

function optional(value: unknown, field: string, fallback: number, min = 1): number | false {
  return value === false ? false : duration(value, field, fallback, min);
}

/** Validates prune options: clear errors at the door, before anything is deleted. */
export function resolvePruneOptions(options: PruneOptions = {}): Resolved {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const quoted = quoteSchema(schema);
  const aggregateMs = optional(options.aggregateRetentionMs, 'aggregateRetentionMs', 7 * DAY, 60_000);
  let inbox: Required<InboxPruneOptions> | false = false;
  if (options.inbox !== undefined && options.inbox !== false) {
    const i = options.inbox;
    if (i.replayHorizonMs === undefined) {
      throw new OutboxValidationError(
        'inbox.replayHorizonMs',
        'is missing',
        'Say how far back your broker may redeliver: dedup records are kept at least that long.',
      );
    }
    const replayHorizonMs = duration(i.replayHorizonMs, 'inbox.replayHorizonMs', 0);
    const dedupRetentionMs = duration(i.dedupRetentionMs, 'inbox.dedupRetentionMs', 7 * DAY);
    const positionRetentionMs = duration(i.positionRetentionMs, 'inbox.positionRetentionMs', 14 * DAY);
    if (dedupRetentionMs < replayHorizonMs) {
      throw new OutboxValidationError(
        'inbox.dedupRetentionMs',
        `(${dedupRetentionMs} ms) is shorter than the replay horizon (${replayHorizonMs} ms)`,
        'Keep dedup records at least as long as a broker may redeliver, or a redelivery applies twice.',
      );
    }
    if (positionRetentionMs < dedupRetentionMs) {
      throw new OutboxValidationError(
        'inbox.positionRetentionMs',
        `(${positionRetentionMs} ms) is shorter than the dedup retention (${dedupRetentionMs} ms)`,
        'Keep positions at least as long as dedup records: a position orders the redeliveries dedup no longer catches.',
      );
    }
    if (aggregateMs !== false && positionRetentionMs <= aggregateMs) {
      throw new OutboxValidationError(
        'inbox.positionRetentionMs',
        `(${positionRetentionMs} ms) is not above aggregateRetentionMs (${aggregateMs} ms)`,
        'Keep positions longer than the aggregates idle time plus the pruner period and the longest publish delay (docs/schema.md, Bounded tables).',
      );
    }
    inbox = {
      replayHorizonMs,
      dedupRetentionMs,
      positionRetentionMs,
      attemptRetentionMs: duration(i.attemptRetentionMs, 'inbox.attemptRetentionMs', 7 * DAY),
      releasedRetentionMs: duration(i.releasedRetentionMs, 'inbox.releasedRetentionMs', 7 * DAY),
    };
  }
  const batchSize = options.batchSize ?? 1000;
  if (!Number.isSafeInteger(batchSize) || batchSize < 1 || batchSize > 100_000) {
    throw new OutboxValidationError(
      'batchSize',
      `is ${String(batchSize)}`,
      'Pass a whole number from 1 to 100000.',
    );
  }
  return {
    schema,
    quoted,
    dryRun: options.dryRun === true,
    aggregateMs,
    relayMs: optional(options.relayRetentionMs, 'relayRetentionMs', DAY),
    auditMs: optional(options.auditRetentionMs, 'auditRetentionMs', 365 * DAY),
    inbox,
    batchSize,
    budgetMs: duration(options.budgetMs, 'budgetMs', 30_000),
  };
}

function emptyCounts(): Record<PrunedTable, number> {
  return Object.fromEntries(PRUNED_TABLES.map((t) => [t, 0])) as Record<PrunedTable, number>;
}

/**
 * Prunes one outbox schema (see the module comment and docs/schema.md, Bounded tables). Returns
 * what it removed per table; `ran: false` when another pruner of the schema holds the lock.
 * Throws on a database error (the batches committed before it stay committed: each is whole).
 */
export async function prune(pool: Pool, options: PruneOptions = {}): Promise<PruneResult> {
  const o = resolvePruneOptions(options);
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    const { rows } = await client.query<{ locked: boolean }>(TRY_LOCK_SQL, [o.schema]);
    if (!rows[0]?.locked) {
      return {
        removed: emptyCounts(),
        dryRun: o.dryRun,
        ran: false,
        complete: false,
        floor: await floorOf(client, o),
      };
    }
    try {
      const run = new PruneRun(client, o);
      const complete = o.dryRun ? await run.count() : await run.prune();
      return { removed: run.removed, dryRun: o.dryRun, ran: true, complete, floor: await floorOf(client, o) };
    } finally {
      await client.query(UNLOCK_SQL, [o.schema]);
    }
  } catch (error) {
    broken = error as Error;
    throw error;
  } finally {
    // A broken connection (or one left inside a transaction) is dropped, its lock with it.
    client.release(broken);
  }
}

async function floorOf(client: PoolClient, o: Resolved): Promise<number> {
  const { rows } = await client.query<{ floor: string }>(withSchema(FLOOR_SQL, o.quoted));
  return Number(rows[0]?.floor ?? 0);
}

/** A key-ordered walk over a table: `{{after}}`/`{{upto}}` bounds of the window, as SQL and values. */
interface Window {
  readonly after: string;
  readonly upto: string;
  readonly values: unknown[];
  /** The last key of the window; undefined: it runs to the end of the table. */
  readonly end: string[] | undefined;
}

class PruneRun {
  readonly removed = emptyCounts();
  readonly #deadline: number;

  constructor(
    private readonly client: PoolClient,
    private readonly o: Resolved,
  ) {
    this.#deadline = performance.now() + o.budgetMs;
  }

  #sql(sql: string): string {
    return withSchema(sql, this.o.quoted);
  }

  #late(): boolean {
    return performance.now() >= this.#deadline;
  }

  async prune(): Promise<boolean> {
    const o = this.o;
    if (o.aggregateMs !== false) {
      if (!(await this.#aggregates(o.aggregateMs))) return false;
      if (!(await this.#progress(o.aggregateMs))) return false;
    }
    if (o.relayMs !== false && !(await this.#aged(RELAYS, 'relays', o.relayMs))) return false;
    if (o.auditMs !== false && !(await this.#aged(AUDIT, 'audit', o.auditMs))) return false;
    if (o.inbox !== false) {
      const i = o.inbox;
      if (!(await this.#aged(INBOX, 'inbox', i.dedupRetentionMs))) return false;
      if (!(await this.#positions(i.positionRetentionMs))) return false;
      if (!(await this.#aged(INBOX_ATTEMPTS, 'inbox_attempts', i.attemptRetentionMs))) return false;
      if (!(await this.#aged(INBOX_RELEASED, 'inbox_quarantine', i.releasedRetentionMs))) return false;
    }
    return true;
  }

  async count(): Promise<boolean> {
    const o = this.o;
    const n = async (sql: string, ms: number) =>
      (await this.client.query<{ n: number }>(this.#sql(sql), [ms])).rows[0]?.n ?? 0;
    if (o.aggregateMs !== false) {
      const { rows } = await this.client.query<{ n: number; progress: number }>(
        this.#sql(COUNT_IDLE_AGGREGATES_SQL),
        [o.aggregateMs],
      );
      this.removed.aggregate_sequences = rows[0]?.n ?? 0;
      this.removed.aggregate_progress =
        (rows[0]?.progress ?? 0) + (await n(COUNT_IDLE_PROGRESS_SQL, o.aggregateMs));
    }
    if (o.relayMs !== false) this.removed.relays = await n(countAgedSql(RELAYS), o.relayMs);
    if (o.auditMs !== false) this.removed.audit = await n(countAgedSql(AUDIT), o.auditMs);
    if (o.inbox !== false) {
      this.removed.inbox = await n(countAgedSql(INBOX), o.inbox.dedupRetentionMs);
      this.removed.inbox_positions = await n(COUNT_IDLE_POSITIONS_SQL, o.inbox.positionRetentionMs);
      this.removed.inbox_attempts = await n(countAgedSql(INBOX_ATTEMPTS), o.inbox.attemptRetentionMs);
      this.removed.inbox_quarantine = await n(countAgedSql(INBOX_RELEASED), o.inbox.releasedRetentionMs);
    }
    return true;
  }

  /** Batches of an aged table until one comes back short. False: the budget ran out first. */
  async #aged(t: AgedTable, table: PrunedTable, ms: number): Promise<boolean> {
    const sql = this.#sql(deleteAgedSql(t));
    for (;;) {
      if (this.#late()) return false;
      const { rowCount } = await this.client.query(sql, [ms, this.o.batchSize]);
      this.removed[table] += rowCount ?? 0;
      if ((rowCount ?? 0) < this.o.batchSize) return true;
    }
  }

  /**
   * The window after `cursor` over `table` keyed by `key`: at most batchSize rows. Its bounds
   * name the key columns as `alias.column`, with values from $2 on (the retention is $1).
   */
  async #window(
    table: string,
    key: readonly string[],
    alias: string,
    cursor: string[] | undefined,
  ): Promise<Window> {
    const row = (prefix: string) => `(${key.map((k) => prefix + k).join(', ')})`;
    const params = (from: number, n: number) =>
      `(${Array.from({ length: n }, (_, i) => `$${from + i}::text`).join(', ')})`;
    const sql = this.#sql(
      WINDOW_END_SQL.replaceAll('{{key}}', key.join(', '))
        .replaceAll('{{table}}', table)
        .replaceAll('{{after}}', cursor === undefined ? 'true' : `${row('')} > ${params(2, key.length)}`),
    );
    const { rows } = await this.client.query<Record<string, string>>(sql, [
      this.o.batchSize,
      ...(cursor ?? []),
    ]);
    const first = rows[0];
    const end = first === undefined ? undefined : key.map((k) => first[k]!);
    const after = cursor === undefined ? 'true' : `${row(`${alias}.`)} > ${params(2, key.length)}`;
    const upto =
      end === undefined ? 'true' : `${row(`${alias}.`)} <= ${params(2 + (cursor?.length ?? 0), key.length)}`;
    return { after, upto, values: [...(cursor ?? []), ...(end ?? [])], end };
  }

  async #aggregates(ms: number): Promise<boolean> {
    const key = ['aggregate_type', 'aggregate_id'];
    let cursor: string[] | undefined;
    for (;;) {
      if (this.#late()) return false;
      const w = await this.#window('aggregate_sequences', key, 's', cursor);
      const picked = IDLE_AGGREGATES_SQL.replace('{{after}}', w.after).replace('{{upto}}', w.upto);
      await this.#batch(async () => {
        const { rows } = await this.client.query<{
          aggregate_type: string;
          aggregate_id: string;
          last_sequence: string;
        }>(this.#sql(picked), [ms, ...w.values]);
        if (rows.length === 0) return;
        // The floor first: once the rows are gone, a producer creating one of these aggregates
        // again must already see a floor at or above its last sequence.
        const highest = rows.reduce(
          (m, r) => (BigInt(r.last_sequence) > m ? BigInt(r.last_sequence) : m),
          0n,
        );
        await this.client.query(this.#sql(RAISE_FLOOR_SQL), [highest.toString()]);
        const { rows: gone } = await this.client.query<{ sequences: number; progress: number }>(
          this.#sql(DELETE_AGGREGATES_SQL),
          [rows.map((r) => r.aggregate_type), rows.map((r) => r.aggregate_id)],
        );
        this.removed.aggregate_sequences += gone[0]?.sequences ?? 0;
        this.removed.aggregate_progress += gone[0]?.progress ?? 0;
      });
      if (w.end === undefined) return true;
      cursor = w.end;
    }
  }

  /**
   * Progress rows of aggregates on caller versions, which have no sequence row for
   * {@link #aggregates} to find: idle past the same retention, not blocked, nothing of them
   * left in events (docs/schema.md, Bounded tables: caller versions).
   */
  async #progress(ms: number): Promise<boolean> {
    const key = ['aggregate_type', 'aggregate_id'];
    let cursor: string[] | undefined;
    for (;;) {
      if (this.#late()) return false;
      const w = await this.#window('aggregate_progress', key, 'g', cursor);
      const picked = IDLE_PROGRESS_SQL.replace('{{after}}', w.after).replace('{{upto}}', w.upto);
      await this.#batch(async () => {
        const { rows } = await this.client.query<{ aggregate_type: string; aggregate_id: string }>(
          this.#sql(picked),
          [ms, ...w.values],
        );
        if (rows.length === 0) return;
        const keyOf = (r: { aggregate_type: string; aggregate_id: string }) =>
          aggregateKeyOf(r.aggregate_type, r.aggregate_id);
        const { rows: used } = await this.client.query<{ key: string }>(this.#sql(PROGRESS_IN_USE_SQL), [
          rows.map(keyOf),
        ]);
        const inUse = new Set(used.map((u) => u.key));
        const idle = rows.filter((r) => !inUse.has(keyOf(r)));
        if (idle.length === 0) return;
        const { rowCount } = await this.client.query(this.#sql(DELETE_PROGRESS_SQL), [
          idle.map((r) => r.aggregate_type),
          idle.map((r) => r.aggregate_id),
          ms,
        ]);
        this.removed.aggregate_progress += rowCount ?? 0;
      });
      if (w.end === undefined) return true;
      cursor = w.end;
    }
  }

  async #positions(ms: number): Promise<boolean> {
    const key = ['consumer', 'aggregate_type', 'aggregate_id'];
    let cursor: string[] | undefined;
    for (;;) {
      if (this.#late()) return false;
      const w = await this.#window('inbox_positions', key, 'p', cursor);
      const picked = IDLE_POSITIONS_SQL.replace('{{after}}', w.after).replace('{{upto}}', w.upto);
      await this.#batch(async () => {
        const { rows } = await this.client.query<{
          consumer: string;
          aggregate_type: string;
          aggregate_id: string;
        }>(this.#sql(picked), [ms, ...w.values]);
        if (rows.length === 0) return;
        const { rowCount } = await this.client.query(this.#sql(DELETE_POSITIONS_SQL), [
          rows.map((r) => r.consumer),
          rows.map((r) => r.aggregate_type),
          rows.map((r) => r.aggregate_id),
        ]);
        this.removed.inbox_positions += rowCount ?? 0;
      });
      if (w.end === undefined) return true;
      cursor = w.end;
    }
  }

  /** One short transaction. */
  async #batch(body: () => Promise<void>): Promise<void> {
    await this.client.query('BEGIN');
    try {
      await body();
      await this.client.query('COMMIT');
    } catch (error) {
      await this.client.query('ROLLBACK').catch(() => undefined);
      throw error;
    }
  }
}
