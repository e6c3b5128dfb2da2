import { describe, expect, it } from 'vitest';
import { OutageLog, RefusedAggregates } from '../../src/relay/outage.js';
import { logRecorder as recorder } from '../helpers/log-recorder.js';

describe('OutageLog', () => {
  it('says the first refusal at once, reminds at most every reminderMs, and says the recovery', () => {
    let now = 1_000;
    const { lines, logger } = recorder();
    const log = new OutageLog(logger, { relayId: 'r1', publisher: 'nats' }, 30_000, () => now);
    log.recovered(); // nothing to recover from: silent
    expect(lines).toEqual([]);

    log.refused(5, 'NATS is not available (nats://***@h:4222): CONNECTION_REFUSED');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: 'warn',
      obj: {
        relayId: 'r1',
        publisher: 'nats',
        refused: 5,
        error: expect.stringMatching(/CONNECTION_REFUSED/),
      },
    });
    for (let i = 0; i < 100; i++) {
      now += 500; // a refused batch every half second: 50 s in all
      log.refused(5, 'still down');
    }
    const reminders = lines.filter((l) => l.msg === 'broker still unavailable');
    expect(reminders).toHaveLength(1); // at 31 s; the next one would be due at 61 s
    expect(reminders[0]!.obj).toMatchObject({ downForMs: 30_000, refusedBatches: 61, refusedEvents: 305 });
    expect(log.since).toBe(1_000);

    now += 2_000;
    log.recovered();
    expect(lines.at(-1)).toMatchObject({
      level: 'info',
      msg: 'broker available again',
      obj: { downForMs: 52_000, refusedBatches: 101, refusedEvents: 505 },
    });
    expect(log.since).toBeUndefined();
    log.recovered();
    expect(lines.filter((l) => l.msg === 'broker available again')).toHaveLength(1);

    log.refused(1, 'down again'); // a new outage is told at once again
    expect(lines.at(-1)?.msg).toMatch(/^broker unavailable/);
  });
});

describe('RefusedAggregates', () => {
  it('leaves refused aggregates out of claims until their retry time, and counts them until they go through', () => {
    let now = 1_000;
    const refused = new RefusedAggregates(() => now);
    refused.refused(['a', 'b'], 1_500);
    expect(refused.waiting()).toEqual(['a', 'b']);
    expect(refused.outstanding()).toBe(2);
    now = 1_500;
    expect(refused.waiting()).toEqual([]); // claimable again
    expect(refused.outstanding()).toBe(2); // but not through yet: the outage goes on
    refused.settled('a');
    expect(refused.outstanding()).toBe(1);
    now = 1_500 + 10_001; // never seen again (dead, deleted, partition moved): forgotten
    expect(refused.outstanding()).toBe(0);
  });
});
