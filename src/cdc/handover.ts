import type { Pool, PoolClient } from 'pg';
import type { Fence } from '../core/fence.js';
import { OutboxError } from '../errors.js';
import type { Logger } from '../logger.js';
import { withSchema } from '../schema/identifiers.js';
import { isDataError, writeIsolated } from './handover-data-errors.js';
import { FencedError, type HandoverRow, type ProgressRow } from './handover-rows.js';
import { START_SET_SQL, STILL_POLLED_SQL, VISIBLE_SQL } from './handover-sql.js';

/** A polled aggregate: the polling path owns it until it has nothing left in the table. */
interface PolledEntry {
  /** Its highest sequence in the table (or handed over to it): the stream skips up to it. */
  maxTableSeq: number;
  /**
   * P claims the aggregate's rows up to here: raised only once the stream has handed over (and
   * committed) everything before, so a table-mode row never overtakes a WAL-mode event of its
   * aggregate that is still on its way into the table (P would take it for a gap, and bridge it).
   */
  claimable: number;
  /** Raised at every handover: a release check that started before one keeps the aggregate. */
  version: number;
}

/**
 * An aggregate with rows in the table at start, none of them failed, scheduled or blocked: its
 * rows stream again if they were committed after the slot's confirmed position, and then the
 * stream delivers them at stream speed; else (parked rows an earlier run left behind, rows from
 * before the slot existed) they never stream again and are the polling path's.
 */
interface UnknownEntry {
  readonly minSeq: number;
  readonly maxSeq: number;
  /** Its delivered sequence at start (aggregate_progress). */
  readonly delivered: number;
}

/** What the stream does with the first event of an unknown aggregate it shows ({@link Handover.resolve}). */
export type Resolution = 'stream' | 'skip' | 'handover';

/** The start read: the polled aggregates and the unknown ones. */
export interface StartSet {
  readonly polled: readonly string[];
  readonly unknown: number;
}

const LRU_SIZE = 100_000;
const MAX_KEYS_PER_CLAIM = 5000;

function splitKey(key: string): [string, string] {
  const i = key.indexOf('\u001f');
  return [key.slice(0, i), key.slice(i + 1)];
}

/**
 * The handover rule between the stream (S) and the polling path (P). An aggregate is polled
 * while it has rows in the table that are P's — failed, dead, scheduled, parked behind one, or
 * left at start where the stream will not show them again ({@link resolve}, {@link caughtUp}) —
 * and then P alone publishes it: S skips what the table holds already (up to `maxTableSeq`) and
 * what P delivered (a bounded memory of P's last sequence per aggregate), and hands anything
 * newer over. An aggregate leaves the polled set once nothing of it is left in the table nor in
 * flight ({@link release}); S publishes its next event.
 */
export class Handover {
  readonly #polled = new Map<string, PolledEntry>();
  /** P's last delivered sequence per aggregate, least recently touched first. */
  readonly #pDelivered = new Map<string, number>();
  readonly #unknown = new Map<string, UnknownEntry>();
  /** Unknown aggregates handed over to P since the start read (their progress is raised at the catch-up). */
  #resolvedToPoll: string[] = [];
  #cursor = 0;
  /** The claim scope's JSON while the polled set's claimable bounds have not changed. */
  #scopeJson: string | undefined;
  readonly #sql: { polledSet: string; stillPolled: string; handover: string; visible: string };

  constructor(
    quotedSchema: string,
    handoverSql: string,
    /** The prefix of the message that marks a handover transaction (`handoverPrefix`). */
    private readonly marker = '',
    private readonly logger?: Logger,
  ) {
    this.#sql = {
      polledSet: withSchema(START_SET_SQL, quotedSchema),
      stillPolled: withSchema(STILL_POLLED_SQL, quotedSchema),
      handover: handoverSql,
      visible: withSchema(VISIBLE_SQL, quotedSchema),
    };
  }

  get size(): number {
    return this.#polled.size;
  }

  isPolled(key: string): boolean {
    return this.#polled.has(key);
  }

  /** Aggregates of the start read whose rows may or may not stream again. */
  get unknownSize(): number {
    return this.#unknown.size;
  }

  isUnknown(key: string): boolean {
    return this.#unknown.has(key);
  }

  /**
   * The first event the stream shows of an unknown aggregate decides who owns it. Rows of one
   * aggregate commit in sequence order and the confirmed position is a prefix of commit order,
   * so: its lowest table row (or a lower sequence: committed before it) streaming means every
   * row of it streams again — the stream owns it. A WAL-mode event at or below the delivered
   * sequence was delivered before (by P: a handover's rows are never streamed as events, so
   * they may sit above it) — skipped, the aggregate stays unknown. A higher sequence means the
   * rows from its lowest on were committed before the confirmed position and will not stream
   * again: the aggregate is P's, with this event.
   */
  resolve(key: string, sequence: number, via: 'table' | 'wal'): Resolution {
    const u = this.#unknown.get(key);
    if (!u) return 'stream';
    if (via === 'wal' && sequence <= u.delivered) return 'skip';
    this.#unknown.delete(key);
    if (via === 'table' ? sequence <= u.minSeq : sequence < u.minSeq) return 'stream';
    this.#toPolled(key, u);
    this.#resolvedToPoll.push(key);
    return 'handover';
  }

  /**
   * The stream passed the catch-up point: what is still unknown never streams again and is P's.
   * Returns every aggregate P got from the unknown ones since the start read.
   */
  caughtUp(): string[] {
    for (const [key, u] of this.#unknown) {
      this.#toPolled(key, u);
      this.#resolvedToPoll.push(key);
    }
    this.#unknown.clear();
    const keys = this.#resolvedToPoll;
    this.#resolvedToPoll = [];
    return keys;
  }

  /**
   * Its rows up to maxSeq are in the table: P may claim them — once the stream is past the
   * catch-up point (P claims nothing before), so no WAL-mode event below is still on its way in.
   */
  #toPolled(key: string, u: UnknownEntry): void {
    this.#polled.set(key, { maxTableSeq: u.maxSeq, claimable: u.maxSeq, version: 0 });
    this.#scopeJson = undefined;
  }

  /**
   * The stream must not publish this event: P delivered it, or (table mode) its row is, or was,
   * in the table. A WAL-mode event at or below `maxTableSeq` may be one the table never had (a
   * reconnect streams again what was not confirmed): it is handed over, and the handover
   * statement leaves out what the table has or P delivered.
   */
  skips(key: string, sequence: number, via: 'table' | 'wal'): boolean {
    const entry = this.#polled.get(key);
    if (via === 'table' && entry && sequence <= entry.maxTableSeq) return true;
    const delivered = this.#pDelivered.get(key);
    return delivered !== undefined && sequence <= delivered;
  }

  /** The aggregate is (now) P's, up to `sequence`: raised before the row is written. */
  enter(key: string, sequence: number): void {
    const entry = this.#polled.get(key);
    if (entry) {
      entry.maxTableSeq = Math.max(entry.maxTableSeq, sequence);
      entry.version += 1;
    } else this.#polled.set(key, { maxTableSeq: sequence, claimable: 0, version: 0 });
  }

  /** The aggregate's rows up to `sequence` are in the table, and everything before them: P may claim them. */
  claimableUpTo(key: string, sequence: number): void {
    const entry = this.#polled.get(key);
    if (entry && sequence > entry.claimable) {
      entry.claimable = sequence;
      this.#scopeJson = undefined;
    }
  }

  /** P delivered this event. */
  deliveredByPoll(key: string, sequence: number): void {
    const last = this.#pDelivered.get(key);
    this.#pDelivered.delete(key);
    this.#pDelivered.set(key, Math.max(last ?? 0, sequence));
    if (this.#pDelivered.size > LRU_SIZE) {
      const oldest = this.#pDelivered.keys().next().value;
      if (oldest !== undefined) this.#pDelivered.delete(oldest);
    }
  }

  /**
   * The next claim's polled aggregates and how far P may claim each (`$9` of POLLED_CLAIM_SQL, a
   * JSON object): all of them, or the next 5,000 round-robin.
   */
  claimScope(): Record<string, number> {
    return JSON.parse(this.claimScopeJson()) as Record<string, number>;
  }

  /**
   * {@link claimScope} as the claim's JSON parameter, serialised again only when a bound
   * changed (or the round-robin moves on): a claim every few ms must not re-serialise
   * thousands of unchanged keys.
   */
  claimScopeJson(): string {
    if (this.#scopeJson !== undefined) return this.#scopeJson;
    let entries = [...this.#polled.entries()].filter(([, e]) => e.claimable > 0);
    if (entries.length > MAX_KEYS_PER_CLAIM) {
      if (this.#cursor >= entries.length) this.#cursor = 0;
      entries = entries.slice(this.#cursor, this.#cursor + MAX_KEYS_PER_CLAIM);
      this.#cursor += MAX_KEYS_PER_CLAIM;
      return JSON.stringify(Object.fromEntries(entries.map(([key, e]) => [key, e.claimable])));
    }
    this.#scopeJson = JSON.stringify(Object.fromEntries(entries.map(([key, e]) => [key, e.claimable])));
    return this.#scopeJson;
  }

  /**
   * Reads the start set from the table (start, reconnect): failed, scheduled or blocked
   * aggregates are polled, as are their rows up to the highest; the others are unknown until
   * the stream shows them ({@link resolve}) or passes the catch-up point ({@link caughtUp}).
   */
  async rebuild(pool: Pool): Promise<StartSet> {
    const { rows } = await pool.query<{
      key: string;
      min_sequence: string;
      max_sequence: string;
      delivered: string;
      polled: boolean;
    }>(this.#sql.polledSet);
    this.#polled.clear();
    this.#unknown.clear();
    this.#resolvedToPoll = [];
    this.#scopeJson = undefined;
    const polled: string[] = [];
    for (const r of rows) {
      const max = Number(r.max_sequence);
      if (r.polled) {
        this.#polled.set(r.key, { maxTableSeq: max, claimable: max, version: 0 });
        polled.push(r.key);
      } else {
        this.#unknown.set(r.key, {
          minSeq: Number(r.min_sequence),
          maxSeq: max,
          delivered: Number(r.delivered),
        });
      }
    }
    return { polled, unknown: this.#unknown.size };
  }

  /**
   * Drops the polled aggregates with no row left in the table, none of `busy` (in flight in P,
   * or on their way into the table). Run by P between its batches.
   */
  async release(pool: Pool, busy: (key: string) => boolean): Promise<number> {
    const candidates = [...this.#polled.entries()].filter(([key]) => !busy(key));
    if (candidates.length === 0) return 0;
    const versions = new Map(candidates.map(([key, e]) => [key, e.version]));
    const keys = [...versions.keys()];
    const still = new Set<string>();
    for (let i = 0; i < keys.length; i += MAX_KEYS_PER_CLAIM) {
      const { rows } = await pool.query<{ key: string }>(this.#sql.stillPolled, [
        keys.slice(i, i + MAX_KEYS_PER_CLAIM),
      ]);
      for (const r of rows) still.add(r.key);
    }
    let released = 0;
    for (const [key, version] of versions) {
      const entry = this.#polled.get(key);
      if (!entry || still.has(key) || entry.version !== version || busy(key)) continue;
      this.#polled.delete(key);
      released += 1;
    }
    if (released > 0) this.#scopeJson = undefined;
    return released;
  }

  /**
   * Waits until the streamed transactions `xids` are visible to new snapshots (see VISIBLE_SQL):
   * nearly always at once; a few ms when the stream outran the commit.
   */
  async visible(client: Pick<PoolClient, 'query'>, xids: readonly number[]): Promise<void> {
    if (xids.length === 0) return;
    const unique = [...new Set(xids)];
    for (let attempt = 0; ; attempt++) {
      const { rows } = await client.query<{ visible: boolean }>(this.#sql.visible, [unique]);
      if (rows[0]?.visible) return;
      if (attempt >= 2000) {
        throw new OutboxError('streamed transactions did not become visible within 10 s', {
          code: 'TXO_CDC_INVISIBLE',
        });
      }
      await new Promise((resolve) => setTimeout(resolve, attempt < 10 ? 1 : 5));
    }
  }

  /**
   * Writes a handover: WAL-mode rows and progress, fenced, in one statement on `client` (whose
   * session has synchronous_commit on). Returns the transaction's id; throws {@link FencedError}.
   * A data error (a row PostgreSQL refuses) does not fail it: see `writeIsolated`.
   */
  async write(
    client: PoolClient,
    fence: Fence,
    rows: readonly HandoverRow[],
    progress: readonly ProgressRow[],
  ): Promise<string> {
    const statement = (r: readonly HandoverRow[], p: readonly ProgressRow[]) =>
      this.#write(client, fence, r, p);
    try {
      return await statement(rows, progress);
    } catch (error) {
      if (!isDataError(error)) throw error;
      return writeIsolated(client, statement, rows, progress, this.logger);
    }
  }

  async #write(
    client: PoolClient,
    fence: Fence,
    rows: readonly HandoverRow[],
    progress: readonly ProgressRow[],
  ): Promise<string> {
    const wal = rows.map((r) => ({ w: r.event.wal!, f: r.failure, fresh: r.fresh === true }));
    const progressKeys = progress.map((p) => splitKey(p.key));
    const { rows: result } = await client.query<{ ok: boolean; xid: string }>(this.#sql.handover, [
      fence.relayId,
      fence.partitions,
      fence.epochs,
      fence.partitions.length,
      wal.map((r) => r.w.eventId),
      wal.map((r) => r.w.partition),
      wal.map((r) => r.w.aggregateType),
      wal.map((r) => r.w.aggregateId),
      wal.map((r) => r.w.sequence),
      wal.map((r) => r.w.sequenceBase),
      wal.map((r) => r.w.type),
      wal.map((r) => r.w.schemaVersion),
      wal.map((r) => r.w.topic),
      wal.map((r) => r.w.payload),
      wal.map((r) => r.w.contentType === 'application/json'),
      wal.map((r) => JSON.stringify(r.w.headers)),
      wal.map((r) => r.w.createdAt),
      wal.map((r) => r.f?.delayMs ?? 0),
      wal.map((r) => (r.f ? 1 : 0)),
      wal.map((r) => r.f?.error ?? null),
      wal.map((r) => r.f?.status ?? 'pending'),
      progressKeys.map((k) => k[0]),
      progressKeys.map((k) => k[1]),
      progress.map((p) => p.delivered),
      progress.map((p) => p.blockMs),
      this.marker,
      wal.map((r) => r.fresh),
    ]);
    if (!result[0]?.ok) throw new FencedError();
    return result[0].xid;
  }
}
