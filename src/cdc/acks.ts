/**
 * Which slot LSN may be confirmed. The stream is cut into units in stream order (a transaction, a
 * non-transactional message, a transaction the relay skips); a unit is done once it is closed (its
 * end LSN known) and every event expected of it settled (published and recorded, or handed over).
 * Acks complete out of order (aggregates publish in parallel), but the slot can only be confirmed past
 * a prefix: confirming a later unit's LSN would drop an earlier unsettled one on reconnect.
 */
import type { Lsn } from './lsn.js';

export interface AckUnit {
  readonly kind: string;
  /** Expects `n` more settlements before the unit is done. */
  expect(n: number): void;
  /** The unit's last byte: a transaction's commit end LSN, a message's LSN. */
  close(endLsn: Lsn, commitTime?: Date): void;
  readonly closed: boolean;
  readonly expected: number;
  readonly settled: number;
}

class Unit implements AckUnit {
  expected = 0;
  settled = 0;
  endLsn: Lsn | undefined = undefined;
  commitTime: Date | undefined = undefined;
  forgotten = false;

  constructor(readonly kind: string) {}

  get closed(): boolean {
    return this.endLsn !== undefined;
  }

  get done(): boolean {
    return this.endLsn !== undefined && this.settled >= this.expected;
  }

  expect(n: number): void {
    if (this.forgotten) throw new Error(`AckTracker: expect() on a ${this.kind} unit already confirmed`);
    if (!Number.isInteger(n) || n < 0) throw new Error(`AckTracker: expect(${n}) needs a count ≥ 0`);
    this.expected += n;
  }

  close(endLsn: Lsn, commitTime?: Date): void {
    if (this.endLsn !== undefined) throw new Error(`AckTracker: a ${this.kind} unit closed twice`);
    this.endLsn = endLsn;
    this.commitTime = commitTime;
  }
}

export class AckTracker {
  /** Units not yet confirmed, in stream order, from `#head`. */
  #units: Unit[] = [];
  #head = 0;

  /** Opens the next unit of the stream. */
  open(kind: string): AckUnit {
    const unit = new Unit(kind);
    this.#units.push(unit);
    return unit;
  }

  /** Records `n` settled events of `unit` (in any order across units). */
  settle(unit: AckUnit, n = 1): void {
    if (!(unit instanceof Unit) || unit.forgotten)
      throw new Error('AckTracker: settle() of a unit it does not hold');
    if (unit.settled + n > unit.expected) {
      throw new Error(
        `AckTracker: ${unit.settled + n} settlements of a ${unit.kind} unit expecting ${unit.expected}`,
      );
    }
    unit.settled += n;
  }

  /**
   * The end LSN of the last unit of the longest prefix of done units, or undefined when the oldest unit
   * is not done. Forgets that prefix: each LSN is returned once.
   */
  confirmable(): Lsn | undefined {
    const units = this.#units;
    let head = this.#head;
    let lsn: Lsn | undefined;
    while (head < units.length) {
      const unit = units[head]!;
      if (!unit.done) break;
      unit.forgotten = true;
      lsn = unit.endLsn;
      head++;
    }
    if (head === units.length) {
      this.#units = [];
      this.#head = 0;
    } else if (head > 1024 && head * 2 > units.length) {
      this.#units = units.slice(head);
      this.#head = 0;
    } else {
      this.#head = head;
    }
    return lsn;
  }

  /** Commit time of the oldest unit not yet confirmed that has one (for lag in seconds). */
  get oldestPendingCommitTime(): Date | undefined {
    const units = this.#units;
    for (let i = this.#head; i < units.length; i++) {
      const time = units[i]!.commitTime;
      if (time !== undefined) return time;
    }
    return undefined;
  }

  /** Units opened and not yet confirmed. */
  get pendingUnits(): number {
    return this.#units.length - this.#head;
  }
}

/** What a relay holds of its stream at one moment (see {@link nothingInFlight}). */
export interface StreamHold {
  /** Changes the stream received and has not handed out (`ReplicationStream.buffered`). */
  readonly buffered: number;
  /** Changes the stream handed out in all (`ReplicationStream.handedOut`). */
  readonly handedOut: number;
  /** Of those, the changes read into units: handed out and not read yet, they are in nobody's books. */
  readonly read: number;
  /** Units opened and not confirmed (`AckTracker.pendingUnits`): a transaction received in part is one. */
  readonly pendingUnits: number;
  /** Events read and not settled (published and recorded, or handed over). */
  readonly unsettled: number;
}

/**
 * Whether the relay may confirm the WAL end of a keepalive (the server's sentPtr): every change
 * received before it was read, and every unit read is settled and confirmed. Frames arrive in the
 * order the server sent them, so such a keepalive's position covers nothing the relay has not
 * settled, and the WAL up to it that the relay never saw holds no change it publishes (other
 * tables and databases, checkpoints; a transaction still open on the server is sent after its
 * commit, past that position). Any doubt — a buffered or unread change, an open or unsettled
 * unit — answers no: confirming past an unpublished event would lose it after a crash.
 */
export function nothingInFlight(hold: StreamHold): boolean {
  return (
    hold.buffered === 0 && hold.read === hold.handedOut && hold.pendingUnits === 0 && hold.unsettled === 0
  );
}
