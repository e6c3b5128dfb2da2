import { describe, expect, it } from 'vitest';
import { AckTracker, nothingInFlight, type StreamHold } from '../../src/cdc/acks.js';

describe('AckTracker', () => {
  it('confirms only the contiguous prefix of done units, settled out of order', () => {
    const t = new AckTracker();
    const a = t.open('transaction');
    a.expect(2);
    a.close(100n, new Date(1000));
    const b = t.open('transaction');
    b.expect(1);
    b.close(200n, new Date(2000));
    const c = t.open('transaction');
    c.expect(3);
    c.close(300n, new Date(3000));

    t.settle(c, 3);
    t.settle(b);
    expect(t.confirmable()).toBeUndefined(); // a is not done: nothing may be confirmed
    expect(t.oldestPendingCommitTime).toEqual(new Date(1000));
    t.settle(a);
    expect(t.confirmable()).toBeUndefined();
    t.settle(a);
    expect(t.confirmable()).toBe(300n); // a, b, c at once
    expect(t.confirmable()).toBeUndefined(); // forgotten: each LSN once
    expect(t.pendingUnits).toBe(0);
    expect(t.oldestPendingCommitTime).toBeUndefined();
  });

  it('an empty unit (skipped transaction, heartbeat) is done once closed', () => {
    const t = new AckTracker();
    const heartbeat = t.open('message');
    heartbeat.close(10n);
    const skipped = t.open('skip');
    skipped.close(20n, new Date(5));
    expect(t.confirmable()).toBe(20n);
    const open = t.open('transaction');
    expect(t.confirmable()).toBeUndefined(); // not closed yet: its end LSN is unknown
    open.close(30n);
    expect(t.confirmable()).toBe(30n);
  });

  it('interleaves: a later done unit waits behind an open one, then both go', () => {
    const t = new AckTracker();
    const first = t.open('transaction');
    first.expect(1);
    first.close(100n, new Date(1));
    const hb = t.open('message');
    hb.close(150n);
    const second = t.open('transaction');
    second.expect(1);
    expect(t.confirmable()).toBeUndefined();
    t.settle(first);
    expect(t.confirmable()).toBe(150n); // first and the heartbeat; second is still open
    t.settle(second); // settled before it is closed
    expect(t.confirmable()).toBeUndefined();
    expect(t.pendingUnits).toBe(1);
    second.close(200n, new Date(2));
    expect(t.confirmable()).toBe(200n);
  });

  it('refuses over-settling, settling a confirmed unit, and closing twice', () => {
    const t = new AckTracker();
    const u = t.open('transaction');
    u.expect(1);
    t.settle(u);
    expect(() => t.settle(u)).toThrow(/expecting 1/);
    u.close(1n);
    expect(() => u.close(2n)).toThrow(/twice/);
    expect(t.confirmable()).toBe(1n);
    expect(() => t.settle(u)).toThrow(/does not hold/);
    expect(() => u.expect(1)).toThrow(/already confirmed/);
  });

  it('keeps up over many units (the head index compacts)', () => {
    const t = new AckTracker();
    const units = Array.from({ length: 5000 }, (_, i) => {
      const u = t.open('transaction');
      u.expect(1);
      u.close(BigInt(i + 1));
      return u;
    });
    for (let i = 0; i < 3000; i++) t.settle(units[i]!);
    expect(t.confirmable()).toBe(3000n);
    expect(t.pendingUnits).toBe(2000);
    for (let i = 4999; i >= 3000; i--) t.settle(units[i]!);
    expect(t.confirmable()).toBe(5000n);
    expect(t.pendingUnits).toBe(0);
  });
});

describe("nothingInFlight (may a keepalive's WAL end be confirmed?)", () => {
  const idle: StreamHold = { buffered: 0, handedOut: 7, read: 7, pendingUnits: 0, unsettled: 0 };

  it('yes only when every change received was read and every unit read is settled and confirmed', () => {
    expect(nothingInFlight(idle)).toBe(true);
    expect(nothingInFlight({ ...idle, buffered: 1 })).toBe(false); // received, not handed out
    expect(nothingInFlight({ ...idle, handedOut: 8 })).toBe(false); // handed out, not read into units
    expect(nothingInFlight({ ...idle, pendingUnits: 1 })).toBe(false);
    expect(nothingInFlight({ ...idle, unsettled: 1 })).toBe(false);
  });

  it('a transaction received in part, an unsettled event, a done unit not yet confirmed: no', () => {
    const t = new AckTracker();
    const hold = (unsettled = 0): StreamHold => ({ ...idle, pendingUnits: t.pendingUnits, unsettled });
    const txn = t.open('transaction'); // BEGIN read, COMMIT not yet
    expect(nothingInFlight(hold())).toBe(false);
    txn.expect(1);
    txn.close(100n);
    expect(t.confirmable()).toBeUndefined();
    expect(nothingInFlight(hold(1))).toBe(false); // its event is being published
    t.settle(txn);
    expect(nothingInFlight(hold())).toBe(false); // done, but its LSN not taken yet
    expect(t.confirmable()).toBe(100n);
    expect(nothingInFlight(hold())).toBe(true);
  });
});
