import type { Pool, PoolClient } from 'pg';
import type { Fence } from '../core/fence.js';
import { withSchema } from '../schema/identifiers.js';
import { FencedError } from './handover-rows.js';
import { type Lsn, parseLsn } from './lsn.js';
import type { StreamEvent } from './stream-batch.js';
import { PROGRESS_LOOKUP_SQL, WAL_PROGRESS_SQL } from './stream-gate-sql.js';

/** What the gate says about one streamed event of an aggregate the stream publishes. */
export type GateVerdict =
  /** The aggregate's next sequence: the stream publishes it. */
  | { readonly kind: 'pass' }
  /** WAL mode, below the next and written before this session: maybe a replay after a reconnect. */
  | { readonly kind: 'skip' }
  /**
   * A repeat (at or below the last published) or a gap: the polling path's gate decides (a repeat
   * goes dead as `sequence_repeat`, a gap is bridged after `gapGraceMs` and a probe). `delivered`
   * is the aggregate's progress to hand over with; `repeat` keeps a WAL-mode row that the handover
   * would otherwise leave out as delivered.
   */
  | { readonly kind: 'handover'; readonly delivered: number; readonly repeat: boolean }
  /** Not looked up yet ({@link StreamGate.lookUp}): the event waits in the queue. */
  | { readonly kind: 'unknown' };

const PASS: GateVerdict = { kind: 'pass' };
const SKIP: GateVerdict = { kind: 'skip' };
const UNKNOWN: GateVerdict = { kind: 'unknown' };

interface GateEntry {
  /** Delivered before this session (aggregate_progress when first seen). */
  readonly floor: number;
  /** The last sequence the stream published (or has in flight) in this session, else `floor`. */
  last: number;
  /** Table mode: the aggregate has a sequence row (default sequences): its rows pass untouched. */
  readonly counted: boolean;
}

const DEFAULT_SIZE = 100_000;
const MAX_LOOKUP_KEYS = 1000;

function splitKey(key: string): [string, string] {
  const i = key.indexOf('\u001f');
  return [key.slice(0, i), key.slice(i + 1)];
}

/**
 * The polling relay's ordering gate for the stream (docs/guarantees.md, Caller versions): an
 * aggregate's event is published only if it is the next after the last one published. The stream
 * reads in commit order, which caller versions do not promise, so it remembers the last published
 * sequence per aggregate (a bounded LRU, per session), looked up from aggregate_progress when
 * first seen, in one statement for every unseen aggregate of the queue. Anything but the next —
 * a repeat, a regression, a gap — hands the aggregate over to the polling path with its progress
 * at the last delivered, whose gate marks a repeat dead and bridges a gap after the grace.
 *
 * Gated: WAL-mode events flagged as caller versions, and table-mode rows of an aggregate without
 * a sequence row (a row does not say whether its sequence is the caller's; the lookup does, and
 * a row with a `sequence_base` is on default sequences). Default sequences pass untouched: they
 * cannot repeat, and a known aggregate's last still follows them (one aggregate may mix table and
 * WAL mode, whose default events write no progress).
 */
export class StreamGate {
  readonly #entries = new Map<string, GateEntry>();
  /** The WAL insert position when this session's stream started: what lies past it was never streamed before. */
  #sessionStart: Lsn = 0n;
  readonly #sql: { lookUp: string; progress: string };

  constructor(
    quotedSchema: string,
    private readonly size = DEFAULT_SIZE,
  ) {
    this.#sql = {
      lookUp: withSchema(PROGRESS_LOOKUP_SQL, quotedSchema),
      progress: withSchema(WAL_PROGRESS_SQL, quotedSchema),
    };
  }

  /** Whether the gate decides on this event (else it passes untouched). */
  static gated(e: StreamEvent): boolean {
    return e.via === 'table' ? (e.message.sequenceBase ?? 0) === 0 : e.wal?.callerVersion === true;
  }

  get known(): number {
    return this.#entries.size;
  }

  /**
   * A new session, its stream started after the WAL insert position `sessionStart`: what was
   * published before is in aggregate_progress (or comes again, below `sessionStart`).
   */
  clear(sessionStart: Lsn): void {
    this.#entries.clear();
    this.#sessionStart = sessionStart;
  }

  /**
   * A WAL-mode event written after this session started: never streamed before, so not a replay.
   * The handover keeps it even at or below its aggregate's progress (a repeat: P marks it dead),
   * where a replay of a delivered one is left out. Its id is `wal:<lsn>` (stream-batch.ts).
   */
  fresh(e: StreamEvent): boolean {
    if (e.via !== 'wal' || !e.message.id.startsWith('wal:')) return false;
    return parseLsn(e.message.id.slice(4)) > this.#sessionStart;
  }

  /** The aggregate left the stream (the polling path's now): looked up again when it comes back. */
  forget(key: string): void {
    this.#entries.delete(key);
  }

  /** Gated aggregates of `events` the gate does not know, at most `max`. */
  unknown(events: Iterable<StreamEvent>, skip: (e: StreamEvent) => boolean, max = MAX_LOOKUP_KEYS): string[] {
    const keys = new Set<string>();
    for (const e of events) {
      if (keys.size >= max) break;
      if (!StreamGate.gated(e) || this.#entries.has(e.key) || keys.has(e.key) || skip(e)) continue;
      // A table-mode row at sequence 1 of an aggregate not seen this session: the first event of a
      // new aggregate (an order id: most of them), on default sequences or a caller's version 1.
      // Nothing before it to gate on, so no lookup (it cost the stream a third of its rate with
      // one aggregate per event); only a caller's version 1 written again after a restart passes.
      if (e.via === 'table' && e.message.sequence === 1) {
        this.learn(e.key, 0);
        continue;
      }
      keys.add(e.key);
    }
    return [...keys];
  }

  /** Reads the progress of `keys` (one statement) and learns it: none means nothing delivered. */
  async lookUp(pool: Pick<Pool, 'query'>, keys: readonly string[]): Promise<void> {
    if (keys.length === 0) return;
    const split = keys.map(splitKey);
    const { rows } = await pool.query<{ key: string; delivered: string; counted: boolean }>(
      this.#sql.lookUp,
      [split.map((k) => k[0]), split.map((k) => k[1])],
    );
    for (const r of rows) this.learn(r.key, Number(r.delivered), r.counted);
  }

  /** The aggregate's delivered sequence as the table knows it, and whether it has a sequence row. */
  learn(key: string, delivered: number, counted = false): void {
    this.#entries.delete(key);
    this.#entries.set(key, { floor: delivered, last: delivered, counted });
    if (this.#entries.size > this.size) {
      const oldest = this.#entries.keys().next().value;
      if (oldest !== undefined) this.#entries.delete(oldest);
    }
  }

  /** The verdict on a gated event, in stream order; a pass counts it as published. */
  check(e: StreamEvent): GateVerdict {
    const entry = this.#entries.get(e.key);
    if (!entry) return UNKNOWN;
    this.#entries.delete(e.key);
    this.#entries.set(e.key, entry);
    const sequence = e.message.sequence;
    if (e.via === 'table' && entry.counted) {
      entry.last = Math.max(entry.last, sequence);
      return PASS;
    }
    const expected = Math.max(entry.last, e.message.sequenceBase ?? 0) + 1;
    if (sequence === expected) {
      entry.last = sequence;
      return PASS;
    }
    if (sequence > expected) return { kind: 'handover', delivered: entry.last, repeat: false };
    // A WAL-mode event written before this session began may be streamed again after a reconnect
    // (the slot was not confirmed past it): it is not published again, nor taken for a repeat. A
    // table-mode row goes to the polling path, which finds it deleted (a replay) or marks it dead.
    if (e.via === 'wal' && !this.fresh(e)) return SKIP;
    return { kind: 'handover', delivered: entry.last, repeat: true };
  }

  /** An event the gate does not decide on was published: a known aggregate's last follows it. */
  passed(e: StreamEvent): void {
    const entry = this.#entries.get(e.key);
    if (entry) entry.last = Math.max(entry.last, e.message.sequence);
  }

  /** A passed event came back (refused as unavailable, or behind one): not published after all. */
  unpass(e: StreamEvent): void {
    const entry = this.#entries.get(e.key);
    if (entry) entry.last = Math.min(entry.last, Math.max(entry.floor, e.message.sequence - 1));
  }

  /**
   * Records the progress of the delivered caller-versioned WAL-mode events among `delivered` (one
   * statement, only when there are any), so a restarted relay still knows what was delivered.
   * Throws {@link FencedError} when another relay took the partitions.
   */
  async recordWal(
    client: Pick<PoolClient, 'query'>,
    fence: Fence,
    delivered: readonly StreamEvent[],
  ): Promise<void> {
    const highest = new Map<string, number>();
    for (const e of delivered) {
      if (e.via !== 'wal' || e.wal?.callerVersion !== true) continue;
      highest.set(e.key, Math.max(highest.get(e.key) ?? 0, e.message.sequence));
    }
    if (highest.size === 0) return;
    const keys = [...highest.keys()];
    const split = keys.map(splitKey);
    const { rows } = await client.query<{ ok: boolean }>(this.#sql.progress, [
      fence.relayId,
      fence.partitions,
      fence.epochs,
      fence.partitions.length,
      split.map((k) => k[0]),
      split.map((k) => k[1]),
      keys.map((k) => highest.get(k)!),
    ]);
    if (!rows[0]?.ok) throw new FencedError();
  }
}

/** A refused aggregate: since when, how often, and how many deliveries the stream had made by then. */
interface Refusal {
  readonly since: number;
  count: number;
  readonly deliveredBefore: number;
}

/**
 * The bound on an aggregate refused as unavailable while the stream delivers others (one topic
 * without a leader, one destination down): the stream keeps such an aggregate in memory only
 * for `maxRefusals` refused batches or `maxMs`, then hands it over to the polling path (no
 * attempt charged), which retries under its own outage backoff, and the slot moves on. A broker
 * down as a whole (nothing delivered since the refusal) is waited out in memory as before.
 */
export class RefusalBound {
  readonly #refused = new Map<string, Refusal>();
  #delivered = 0;

  constructor(
    private readonly maxRefusals: number,
    private readonly maxMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** One batch's verdict: the aggregates delivered and refused. Returns the aggregates to hand over. */
  judged(deliveredKeys: readonly string[], refusedKeys: Iterable<string>): string[] {
    const before = this.#delivered;
    this.#delivered += deliveredKeys.length;
    for (const key of deliveredKeys) this.#refused.delete(key);
    const out: string[] = [];
    const now = this.now();
    for (const key of refusedKeys) {
      let r = this.#refused.get(key);
      if (!r) {
        r = { since: now, count: 0, deliveredBefore: before };
        this.#refused.set(key, r);
      }
      r.count += 1;
      if (
        this.#delivered > r.deliveredBefore &&
        (r.count >= this.maxRefusals || now - r.since >= this.maxMs)
      ) {
        out.push(key);
        this.#refused.delete(key);
      }
    }
    return out;
  }

  forget(key: string): void {
    this.#refused.delete(key);
  }

  clear(): void {
    this.#refused.clear();
    this.#delivered = 0;
  }
}
