import { describe, expect, it } from 'vitest';
import { aggregateKeyOf } from '../../src/aggregate-key.js';
import { HoldBack } from '../../src/relay/claim/hold-back.js';
import { logRecorder } from '../helpers/log-recorder.js';

const row = (id: string, type = 'order') => ({ aggregate_type: type, aggregate_id: id });
const key = (id: string, type = 'order') => aggregateKeyOf(type, id);

function setup(holdMs = 1000) {
  let now = 10_000;
  const { lines, logger } = logRecorder();
  const holdBack = new HoldBack(holdMs, logger, 'r1', () => now);
  return { holdBack, lines, advance: (ms: number) => (now += ms) };
}

describe('HoldBack', () => {
  it('leaves a held aggregate out of claims for holdMs, then lets it in again', () => {
    const { holdBack, advance } = setup(1000);
    holdBack.hold([row('a'), row('b')]);
    expect(holdBack.excluded([])).toEqual([key('a'), key('b')]);
    advance(999);
    expect(holdBack.excluded(['refused'])).toEqual([key('a'), key('b'), 'refused']);
    advance(1);
    expect(holdBack.excluded(['refused'])).toEqual(['refused']);
  });

  it('does not hold an aggregate with an event in flight until all of them landed', () => {
    const { holdBack } = setup();
    holdBack.claimed(key('a'));
    holdBack.claimed(key('a'));
    holdBack.hold([row('a')]);
    expect(holdBack.excluded([])).toEqual([]);
    holdBack.landed(key('a'));
    holdBack.hold([row('a')]);
    expect(holdBack.excluded([])).toEqual([]); // one event still in flight
    holdBack.landed(key('a'));
    holdBack.claimStarting();
    holdBack.hold([row('a')]);
    expect(holdBack.excluded([])).toEqual([key('a')]);
  });

  it('does not hold an aggregate whose event landed while the claim ran: its snapshot may predate that outcome', () => {
    const { holdBack } = setup();
    holdBack.claimed(key('a'));
    holdBack.claimStarting();
    holdBack.landed(key('a'));
    holdBack.hold([row('a')]);
    expect(holdBack.excluded([])).toEqual([]);
    holdBack.claimStarting();
    holdBack.hold([row('a')]);
    expect(holdBack.excluded([])).toEqual([key('a')]);
  });

  it('an aggregate is busy while in flight and, once landed, until the next claim starts', () => {
    const { holdBack } = setup();
    holdBack.claimStarting();
    expect(holdBack.busy(key('a'))).toBe(false);
    holdBack.claimed(key('a'));
    expect(holdBack.busy(key('a'))).toBe(true);
    holdBack.claimStarting();
    holdBack.landed(key('a')); // recorded while this claim ran: it may have read old progress
    expect(holdBack.busy(key('a'))).toBe(true);
    holdBack.claimStarting();
    expect(holdBack.busy(key('a'))).toBe(false);
  });

  it('knows the highest sequence in flight per aggregate: a passed event at or below it repeats one', () => {
    const { holdBack } = setup();
    expect(holdBack.repeats(key('a'), 3)).toBe(false);
    holdBack.claimed(key('a'), 2);
    holdBack.claimed(key('a'), 3);
    expect(holdBack.repeats(key('a'), 3)).toBe(true);
    expect(holdBack.repeats(key('a'), 4)).toBe(false);
    expect(holdBack.repeats(key('b'), 1)).toBe(false);
    holdBack.landed(key('a'));
    expect(holdBack.repeats(key('a'), 3)).toBe(true); // one still in flight
    holdBack.landed(key('a'));
    holdBack.claimStarting();
    expect(holdBack.repeats(key('a'), 3)).toBe(false);
    holdBack.claimed(key('a'), 5);
    holdBack.forgetInFlight();
    expect(holdBack.repeats(key('a'), 5)).toBe(false);
  });

  it('an outcome recorded while a claim ran still marks a repeat in that claim; the next claim sees the outcome itself', () => {
    const { holdBack } = setup();
    holdBack.claimed(key('a'), 2);
    holdBack.claimStarting(); // its snapshot predates the outcome below
    holdBack.landed(key('a'));
    expect(holdBack.repeats(key('a'), 2)).toBe(true);
    expect(holdBack.repeats(key('a'), 3)).toBe(false);
    holdBack.claimStarting(); // this one's snapshot has the outcome: the gate says `repeat` itself
    expect(holdBack.repeats(key('a'), 2)).toBe(false);
  });

  it('an aggregate still in flight keeps its top across claims', () => {
    const { holdBack } = setup();
    holdBack.claimed(key('a'), 2);
    holdBack.claimed(key('a'), 3);
    holdBack.claimStarting();
    holdBack.landed(key('a'));
    holdBack.claimStarting();
    expect(holdBack.repeats(key('a'), 3)).toBe(true);
    holdBack.landed(key('a'));
    holdBack.claimStarting();
    expect(holdBack.repeats(key('a'), 3)).toBe(false);
  });

  it('forgets what is in flight after a loop error', () => {
    const { holdBack } = setup();
    holdBack.claimed(key('a'));
    holdBack.forgetInFlight();
    holdBack.hold([row('a')]);
    expect(holdBack.excluded([])).toEqual([key('a')]);
  });

  it('keys aggregates by type and id together', () => {
    const { holdBack } = setup();
    holdBack.claimed(key('1', 'a'));
    holdBack.hold([row('1', 'b')]);
    expect(holdBack.excluded([])).toEqual([key('1', 'b')]);
  });

  it('counts the claims that held an aggregate, not its rows, and warns at 10 and every 100th', () => {
    const { holdBack, lines } = setup();
    holdBack.hold(Array.from({ length: 20 }, () => row('a'))); // one claim, 20 rows
    expect(lines).toEqual([]);
    for (let i = 2; i <= 9; i++) holdBack.hold([row('a')]);
    expect(lines).toEqual([]);
    holdBack.hold([row('a'), row('a')]);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: 'warn',
      msg: expect.stringMatching(/^aggregate held back/),
      obj: { relayId: 'r1', aggregateType: 'order', aggregateId: 'a', times: 10 },
    });
    for (let i = 11; i <= 199; i++) holdBack.hold([row('a')]);
    expect(lines.map((l) => l.obj['times'])).toEqual([10, 100]);
    holdBack.hold([row('a')]);
    expect(lines.map((l) => l.obj['times'])).toEqual([10, 100, 200]);
  });

  it('starts counting over when an event of the aggregate is claimed', () => {
    const { holdBack, lines } = setup();
    for (let i = 1; i <= 9; i++) holdBack.hold([row('a')]);
    holdBack.claimed(key('a'));
    holdBack.landed(key('a'));
    holdBack.hold([row('a')]);
    expect(lines).toEqual([]);
  });

  it('drops the counts once more than 10 000 aggregates are counted', () => {
    const { holdBack, lines } = setup();
    for (let i = 1; i <= 9; i++) holdBack.hold([row('a')]);
    holdBack.hold(Array.from({ length: 10_001 }, (_, i) => row(`other-${i}`)));
    holdBack.excluded([]);
    holdBack.hold([row('a')]); // the 10th claim, but counted as the first
    expect(lines).toEqual([]);
  });
});
