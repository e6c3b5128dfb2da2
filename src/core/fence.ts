/**
 * The leases a batch was read under: every write that settles it (outcome, hand-over, a repeat
 * marked dead, a gap bridged) is fenced by them, so a relay that lost a partition changes
 * nothing of it. One type for every source.
 */
export interface Fence {
  readonly relayId: string;
  readonly partitions: readonly number[];
  readonly epochs: readonly string[];
}
