/** An aggregate's lowest claimable event, held back because its sequence is above delivered+1. */
export interface GapHead {
  /** The aggregate's key ({@link aggregateKeyOf}). */
  readonly key: string;
  /** The event's row id. */
  readonly id: string;
  readonly partition: number;
}

/** Heads per probe at most: the probe filters the rows it reads by their aggregates, one by one. */
export const MAX_HEADS_PER_PROBE = 100;

interface Watched {
  id: string;
  partition: number;
  /** When a claim first found the aggregate held at a gap (ms since the epoch). */
  readonly since: number;
  /** When it was last found so. */
  seen: number;
  /** Not probed before then. */
  probeAt: number;
  /** Probes that found an earlier event. */
  misses: number;
}

export interface GapWatchOptions {
  /** How long a head must be held at a gap before it is probed, ms. */
  readonly graceMs: number;
  /** At most one probe (for all partitions) this often, ms. Default 1000. */
  readonly probeEveryMs?: number;
  /** A head not found held for this long is forgotten, ms. Default 60 000. */
  readonly forgetMs?: number;
  /** At most this many heads watched; beyond, heads already probed make room. Default 10 000. */
  readonly max?: number;
  /** The longest wait between two probes of one head, ms. Default 60 000. */
  readonly maxProbeWaitMs?: number;
  readonly now?: () => number;
}

/**
 * The gap bridge's memory (pure: no I/O). Claims report the heads they found held at a gap
 * (not in flight: an event in flight holds its successor back legitimately until its outcome
 * is recorded) and the aggregates they passed an event of. A head held for `graceMs` without
 * its aggregate passing anything is due for a probe; probes come at most once per
 * `probeEveryMs` for the relay as a whole (all partitions in one statement), each for up to
 * {@link MAX_HEADS_PER_PROBE} due heads. A probe that finds an earlier event (deliverAfter,
 * backoff, dead) puts its head off for twice the last wait, up to `maxProbeWaitMs`: an
 * aggregate waiting on a delivery an hour away does not cost a probe a second.
 *
 * The map is bounded: heads not seen for `forgetMs` are dropped (their aggregate moved, or its
 * partition went to another relay), and a new head finding `max` watched evicts the least
 * recently seen of those a probe already found waiting on an earlier event. Not plain least
 * recently seen: heads behind a deliverAfter are seen again at every claim, and with more of
 * them than `max` plain LRU would evict each before its grace ran out (each comes back new, and
 * evicts the next), so no head at all would ever be probed. A head not probed yet is never
 * evicted; when all are such, the new one waits, at most until they are probed (grace, then
 * {@link MAX_HEADS_PER_PROBE} a second). In memory only: a restarted relay starts the grace again.
 */
export class GapWatch {
  readonly #heads = new Map<string, Watched>();
  /** When the last probe was handed out. */
  #probedAt = Number.NEGATIVE_INFINITY;
  readonly #graceMs: number;
  readonly #probeEveryMs: number;
  readonly #forgetMs: number;
  readonly #max: number;
  readonly #maxProbeWaitMs: number;
  readonly #now: () => number;
  #sweptAt = 0;

  constructor(options: GapWatchOptions) {
    this.#graceMs = options.graceMs;
    this.#probeEveryMs = options.probeEveryMs ?? 1000;
    this.#forgetMs = Math.max(options.forgetMs ?? 60_000, options.graceMs);
    this.#max = options.max ?? 10_000;
    this.#maxProbeWaitMs = Math.max(options.maxProbeWaitMs ?? 60_000, options.graceMs);
    this.#now = options.now ?? Date.now;
  }

  /** How many heads are watched. */
  get size(): number {
    return this.#heads.size;
  }

  /** A claim found these heads held at a gap. */
  held(heads: readonly GapHead[]): void {
    const now = this.#now();
    this.#sweep(now);
    let room = this.#max - this.#heads.size;
    let evictable = true;
    for (const head of heads) {
      const known = this.#heads.get(head.key);
      if (known) {
        known.id = head.id;
        known.partition = head.partition;
        known.seen = now;
        continue;
      }
      if (room <= 0 && evictable) {
        const gone = this.#evict();
        evictable = gone > 0;
        room += gone;
      }
      if (room <= 0) continue;
      room -= 1;
      this.#heads.set(head.key, {
        id: head.id,
        partition: head.partition,
        since: now,
        seen: now,
        probeAt: now + this.#graceMs,
        misses: 0,
      });
    }
  }

  /**
   * Makes room: drops the least recently seen heads a probe found waiting (`misses > 0`), 1% of
   * `max` at a time so that a full watch costs one pass per hundred new heads, not one each.
   * Returns how many went.
   */
  #evict(): number {
    const probed = [...this.#heads].filter(([, w]) => w.misses > 0);
    probed.sort(([, a], [, b]) => a.seen - b.seen);
    const gone = probed.slice(0, Math.max(1, Math.ceil(this.#max / 100)));
    for (const [key] of gone) this.#heads.delete(key);
    return gone.length;
  }

  /** A claim passed an event of `key`: it is not held at a gap (any more). */
  passed(key: string): void {
    this.#heads.delete(key);
  }

  /**
   * The heads to probe now, by partition (only of `partitions`, those this relay holds): held
   * past their probe time, at most {@link MAX_HEADS_PER_PROBE} of them (the rest in the next
   * probe), and nothing when the last probe was handed out within `probeEveryMs`. Handing out
   * heads counts as probing now.
   */
  due(partitions: readonly number[]): Map<number, GapHead[]> {
    const now = this.#now();
    const result = new Map<number, GapHead[]>();
    if (this.#heads.size === 0 || now - this.#probedAt < this.#probeEveryMs) return result;
    const mine = new Set(partitions);
    let count = 0;
    for (const [key, w] of this.#heads) {
      if (w.probeAt > now || !mine.has(w.partition)) continue;
      let heads = result.get(w.partition);
      if (!heads) {
        heads = [];
        result.set(w.partition, heads);
      }
      heads.push({ key, id: w.id, partition: w.partition });
      if (++count === MAX_HEADS_PER_PROBE) break;
    }
    if (count > 0) this.#probedAt = now;
    return result;
  }

  /** The probe bridged `key`'s head: forgotten. */
  bridged(key: string): void {
    this.#heads.delete(key);
  }

  /** The probe did not bridge `key`'s head (an earlier event holds it, or it moved): probed again later. */
  missed(key: string): void {
    const w = this.#heads.get(key);
    if (!w) return;
    w.misses += 1;
    const wait = Math.min(this.#maxProbeWaitMs, this.#graceMs * 2 ** w.misses);
    w.probeAt = this.#now() + wait;
  }

  /** How long `key` has been held at a gap, ms (undefined when not watched). */
  heldFor(key: string): number | undefined {
    const w = this.#heads.get(key);
    return w === undefined ? undefined : this.#now() - w.since;
  }

  /** Drops heads not seen for `forgetMs`; at most once a second. */
  #sweep(now: number): void {
    if (now - this.#sweptAt < 1000) return;
    this.#sweptAt = now;
    for (const [key, w] of this.#heads) {
      if (now - w.seen > this.#forgetMs) this.#heads.delete(key);
    }
  }
}
