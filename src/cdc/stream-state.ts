import type { StreamEvent } from './stream-batch.js';

/** What the stream has in flight, for the take, the hand-over source's claims and its release. */
export class StreamInFlight {
  /** Table row ids the stream has in flight (published, outcome not recorded). */
  readonly ids = new Set<string>();
  /** Events per aggregate the stream has in flight. */
  readonly busy = new Map<string, number>();
  /** Aggregates whose handover has not committed yet. */
  readonly handingOver = new Map<string, number>();

  track(events: readonly StreamEvent[], delta: 1 | -1): void {
    for (const e of events) {
      const n = (this.busy.get(e.key) ?? 0) + delta;
      if (n > 0) this.busy.set(e.key, n);
      else this.busy.delete(e.key);
      if (e.via === 'table') {
        if (delta > 0) this.ids.add(e.message.id);
        else this.ids.delete(e.message.id);
      }
    }
  }

  /** A handover of these events is being written (`1`) or was (`-1`). */
  handing(events: readonly StreamEvent[], delta: 1 | -1): void {
    for (const e of events) {
      const n = (this.handingOver.get(e.key) ?? (delta > 0 ? 0 : 1)) + delta;
      if (n > 0) this.handingOver.set(e.key, n);
      else this.handingOver.delete(e.key);
    }
  }

  clear(): void {
    this.ids.clear();
    this.busy.clear();
    this.handingOver.clear();
  }
}

/** The stream's counters of `stats().cdc`. */
export interface StreamCounters {
  reconnects: number;
  handovers: number;
  confirmed: bigint;
  server: bigint;
}
