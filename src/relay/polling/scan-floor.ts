/**
 * Where the claim's scan starts: past the ids the relay knows are behind it, so that a claim
 * does not walk the rows delivered since the oldest open snapshot began.
 *
 * Why: a delivered event is deleted, but its row and index entry stay until no snapshot can see
 * them. While any transaction holds an older snapshot (a long report, a session idle in
 * transaction), every claim that starts at the lowest id walks every row deleted since, and its
 * time grows with that snapshot's age (about 40 ns a row, 24 ms after ten minutes at 1,000
 * events/s). Starting at a floor skips them through the primary key.
 *
 * The floor is a hint, never a promise. A row below it is not lost, only found later:
 * - Every `fullEveryMs` a claim starts at the beginning (a full scan). That finds what a floor can
 *   skip: an event whose transaction committed long after its id was drawn, a retry whose backoff
 *   ran out, a scheduled event come due, a dead event replayed, an aggregate held back. The period
 *   is the poll interval, and stretches to 50 full scans' time (at most 10 poll intervals) when
 *   full scans are slow, so they never take more than 2 % of the claim connection's time. Slow
 *   means the quickest of the last three: one scan slowed by a busy machine (the process or the
 *   backend off the CPU for a few ms) does not stretch the period; it stretched it up to tenfold,
 *   and a late commit below the floor waited that long (W2's maximum: 6–11 s).
 * - The floor trails: it is the lowest first id of the claims of the last `trailMs`, and of the
 *   last claim before them (the first claim with rows after a start or a reset counts as 0). A transaction that drew a low id and commits later than the claims
 *   that saw higher ones is found by the next claim as long as it commits within `trailMs`; rows
 *   a claim returned but did not publish (held, in flight) stay above the floor as long.
 * - A change of the partitions held starts over at the beginning.
 * Order does not rest on it either: the gate passes an event only right after its aggregate's
 * delivered sequence, so a skipped earlier event holds its aggregate back until it is found.
 */
export interface ScanStart {
  /** The lowest id the claim may return (a bigint as text). */
  readonly from: string;
  readonly full: boolean;
}

export interface ScanFloorOptions {
  /** Full scans at least this often, ms (the relay's poll interval). */
  readonly fullEveryMs: number;
  /** How far the floor trails the claims, ms. Default 2,000. */
  readonly trailMs?: number;
  readonly now?: () => number;
}

interface Seen {
  readonly at: number;
  readonly firstId: bigint;
}

const FULL: ScanStart = Object.freeze({ from: '0', full: true });
/** Full scans take at most 1/SHARE of the time between them. */
const SHARE = 50;
const MAX_STRETCH = 10;
/** The period stretches by the quickest of this many last full scans. */
const SLOW_SCANS = 3;

export class ScanFloor {
  readonly #fullEveryMs: number;
  readonly #trailMs: number;
  readonly #now: () => number;
  /** First ids of recent claims, oldest first, from `#head` on: the last one older than the trail, then the rest. */
  #seen: Seen[] = [];
  #head = 0;
  #partitions = '';
  #lastFullAt = Number.NEGATIVE_INFINITY;
  #periodMs: number;
  /** The last full scans' times, ms (at most SLOW_SCANS). */
  readonly #fullMs: number[] = [];

  constructor(options: ScanFloorOptions) {
    this.#fullEveryMs = options.fullEveryMs;
    this.#trailMs = options.trailMs ?? 2_000;
    this.#now = options.now ?? Date.now;
    this.#periodMs = this.#fullEveryMs;
  }

  /** Where the next claim over `partitions` starts. */
  start(partitions: readonly number[]): ScanStart {
    const key = partitions.join(',');
    if (key !== this.#partitions) {
      this.#partitions = key;
      this.reset();
    }
    const now = this.#now();
    if (now - this.#lastFullAt >= this.#periodMs) return FULL;
    this.#forget(now);
    const seen = this.#seen;
    if (this.#head === seen.length) return FULL;
    let floor = seen[this.#head]!.firstId;
    for (let i = this.#head + 1; i < seen.length; i++) if (seen[i]!.firstId < floor) floor = seen[i]!.firstId;
    return { from: floor.toString(), full: false };
  }

  /** A claim that started at `start` returned rows from `firstId` on (undefined: none) in `ms`. */
  claimed(start: ScanStart, firstId: string | undefined, ms: number): void {
    const now = this.#now();
    if (start.full) {
      this.#lastFullAt = now;
      this.#fullMs.push(ms);
      if (this.#fullMs.length > SLOW_SCANS) this.#fullMs.shift();
      const quickest = this.#fullMs.length < SLOW_SCANS ? 0 : Math.min(...this.#fullMs);
      this.#periodMs = Math.min(
        MAX_STRETCH * this.#fullEveryMs,
        Math.max(this.#fullEveryMs, SHARE * quickest),
      );
    }
    // A claim that found nothing says nothing about where the next rows are: the floor stays.
    if (firstId === undefined) return;
    // The first rows since the start (or a reset): events drawn before them may commit after this
    // claim, and no earlier claim marks where they are. The floor stays at the beginning for the
    // trail (their commits come within it), not at this claim's first id, so that they are found at
    // once, not at the next full scan.
    this.#seen.push({ at: now, firstId: this.#seen.length === 0 ? 0n : BigInt(firstId) });
  }

  /** Starts over: the next claim is a full scan (partitions changed, the pipeline was reset). */
  reset(): void {
    this.#seen = [];
    this.#head = 0;
    this.#lastFullAt = Number.NEGATIVE_INFINITY;
  }

  /** Keeps the claims of the trail, and the last one before it. */
  #forget(now: number): void {
    const seen = this.#seen;
    while (this.#head + 1 < seen.length && seen[this.#head + 1]!.at <= now - this.#trailMs) this.#head += 1;
    if (this.#head > 1024 && this.#head * 2 > seen.length) {
      this.#seen = seen.slice(this.#head);
      this.#head = 0;
    }
  }
}
