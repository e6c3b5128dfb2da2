/**
 * The Kafka consumer's per-partition bookkeeping, without a broker: which received offsets were
 * handled, the commit point below which every record was handled, and what a rebalance does to
 * them. Commit points only move forward; a partition this member lost is forgotten (its records
 * still in flight commit nothing); a partition it kept keeps its bookkeeping (what a re-read
 * delivers again is skipped: offsets only grow); a partition it gained starts where the stream's
 * next 'offsets' event says, and records fetched before that are skipped for it.
 */

/** Offsets of one partition received and not yet committed, in order, with their handled flag. */
export interface PartitionState {
  readonly pending: Array<{ offset: bigint; handled: boolean }>;
  /** Next offset to commit (last handled contiguous offset + 1), if it moved since the last commit. */
  commitable: bigint | undefined;
  /** Highest offset committed (or on its way): commit points only move forward. */
  committed: bigint;
  /** Highest offset received: a re-read of the partition skips up to here. */
  highest: bigint;
  /** Gained in a rebalance and nothing received yet: starts where the stream's next 'offsets' says. */
  gained: boolean;
}

function newState(highest: bigint, gained: boolean): PartitionState {
  return { pending: [], commitable: undefined, committed: -1n, highest, gained };
}

/** A commit point taken out of a partition's bookkeeping, on its way to the broker. */
export interface CommitEntry {
  readonly partition: number;
  readonly state: PartitionState;
  readonly offset: bigint;
  /** The partition's commit point before this one. */
  readonly previous: bigint;
}

/** A record taken into the bookkeeping: say {@link PartitionBook.handled} once it was handled. */
export interface Received {
  readonly partition: number;
  readonly state: PartitionState;
  readonly entry: { readonly offset: bigint; handled: boolean };
}

/** The partitions of the topic the group assigned to this member; undefined before any assignment. */
export type Assignment = () => readonly number[] | undefined;

export class PartitionBook {
  readonly #partitions = new Map<number, PartitionState>();
  readonly #assignment: Assignment;
  /** Since the last join, partitions gained get their bookkeeping from the 'offsets' event only. */
  #joined = false;
  /** Records still buffered from before the last 'offsets' event, and the partitions it gained. */
  #stale: { left: number; gained: Set<PartitionState> } = { left: 0, gained: new Set() };

  constructor(assignment: Assignment) {
    this.#assignment = assignment;
  }

  /** Whether the group assigned the partition to this member (before any assignment: yes). */
  assigned(partition: number): boolean {
    const partitions = this.#assignment();
    return partitions === undefined || partitions.includes(partition);
  }

  /**
   * Takes a record into its partition's bookkeeping, or undefined when it is not to be handled
   * here: not this member's partition (its owner handles it), received already (a re-read after
   * a rebalance), or fetched before this member gained the partition.
   */
  receive(partition: number, offset: bigint): Received | undefined {
    const stale = this.#stale.left > 0;
    if (stale) this.#stale.left -= 1;
    if (!this.assigned(partition)) return undefined;
    let state = this.#partitions.get(partition);
    if (!state) {
      // Gained in a rebalance: wait for the stream's 'offsets' event to say where it starts.
      if (this.#joined) return undefined;
      state = newState(-1n, false);
      this.#partitions.set(partition, state);
    }
    if (stale && this.#stale.gained.has(state)) return undefined;
    if (offset <= state.highest) return undefined;
    const entry = { offset, handled: false };
    state.pending.push(entry);
    state.highest = offset;
    state.gained = false;
    return { partition, state, entry };
  }

  /**
   * Whether the record's bookkeeping is still its partition's: false once a rebalance took the
   * partition away (it commits nothing any more, its deferred records are abandoned).
   */
  isCurrent(received: Pick<Received, 'partition' | 'state'>): boolean {
    return this.#partitions.get(received.partition) === received.state;
  }

  /** Marks the record handled and moves the commit point over the handled prefix; true when it moved. */
  handled(received: Received): boolean {
    received.entry.handled = true;
    if (!this.isCurrent(received)) return false;
    const { state } = received;
    let moved = false;
    while (state.pending.length > 0 && state.pending[0]!.handled) {
      state.commitable = state.pending.shift()!.offset + 1n;
      moved = true;
    }
    return moved;
  }

  /** Takes the moved commit points of the assigned partitions out, for one commit request. */
  collect(): CommitEntry[] {
    const entries: CommitEntry[] = [];
    for (const [partition, state] of this.#partitions) {
      const offset = state.commitable;
      state.commitable = undefined;
      if (offset === undefined || offset <= state.committed || !this.assigned(partition)) continue;
      entries.push({ partition, state, offset, previous: state.committed });
      state.committed = offset;
    }
    return entries;
  }

  /**
   * A commit failed: puts its commit points back (unless a newer one or a new generation replaced
   * them); true when any was put back (worth retrying).
   */
  restore(entries: readonly CommitEntry[]): boolean {
    let restored = false;
    for (const e of entries) {
      if (!this.isCurrent(e)) continue;
      if (e.state.committed === e.offset) e.state.committed = e.previous;
      if (e.state.commitable === undefined || e.state.commitable < e.offset) e.state.commitable = e.offset;
      restored = true;
    }
    return restored;
  }

  /** Whether a commit point moved and was not committed yet. */
  get uncommitted(): boolean {
    return [...this.#partitions.values()].some((p) => p.commitable !== undefined);
  }

  /**
   * A new generation: the commit points to commit now, and the partitions this member lost
   * forgotten. Partitions it keeps keep their bookkeeping; partitions it gains wait for
   * {@link offsets}.
   */
  join(): CommitEntry[] {
    const entries = this.collect();
    for (const partition of this.#partitions.keys())
      if (!this.assigned(partition)) this.#partitions.delete(partition);
    this.#joined = true;
    return entries;
  }

  /**
   * The stream settled where it reads each assigned partition from (`startOf`): a gained
   * partition starts there. The `buffered` records the stream holds by then were fetched before
   * (under an older assignment): for a gained partition they are skipped.
   */
  offsets(startOf: (partition: number) => bigint | undefined, buffered: number): void {
    if (!this.#joined) return;
    const gained = new Set<PartitionState>();
    for (const partition of this.#assignment() ?? []) {
      const existing = this.#partitions.get(partition);
      // Kept, and already reading: its bookkeeping goes on.
      if (existing && !existing.gained) continue;
      // Gained, nothing received yet: (again) from where the stream now reads it.
      const from = startOf(partition);
      const state = existing ?? newState(-1n, true);
      state.highest = from === undefined ? -1n : from - 1n;
      this.#partitions.set(partition, state);
      gained.add(state);
    }
    this.#stale = { left: buffered, gained };
  }
}
