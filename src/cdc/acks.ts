// STAND-IN (core): replaced by wire's src/cdc/acks.ts when merged.
import type { Lsn } from './lsn.js';

export interface AckUnit {
  expect(n: number): void;
  close(endLsn: Lsn, commitTime?: Date): void;
}

interface UnitState extends AckUnit {
  expected: number;
  settled: number;
  closed: boolean;
  endLsn: Lsn;
  commitTime: Date | undefined;
}

export class AckTracker {
  readonly #units: UnitState[] = [];
  #head = 0;

  open(_kind: string): AckUnit {
    const unit: UnitState = {
      expected: 0,
      settled: 0,
      closed: false,
      endLsn: 0n,
      commitTime: undefined,
      expect(n: number) {
        unit.expected += n;
      },
      close(endLsn: Lsn, commitTime?: Date) {
        unit.closed = true;
        unit.endLsn = endLsn;
        unit.commitTime = commitTime;
      },
    };
    this.#units.push(unit);
    return unit;
  }

  settle(unit: AckUnit, n = 1): void {
    (unit as UnitState).settled += n;
  }

  confirmable(): Lsn | undefined {
    let lsn: Lsn | undefined;
    while (this.#head < this.#units.length) {
      const u = this.#units[this.#head]!;
      if (!u.closed || u.settled < u.expected) break;
      lsn = u.endLsn;
      this.#head += 1;
    }
    if (this.#head > 1024) {
      this.#units.splice(0, this.#head);
      this.#head = 0;
    }
    return lsn;
  }

  get oldestPendingCommitTime(): Date | undefined {
    return this.#units[this.#head]?.commitTime;
  }

  get pendingUnits(): number {
    return this.#units.length - this.#head;
  }
}
