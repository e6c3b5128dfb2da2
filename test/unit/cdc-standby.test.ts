import { describe, expect, it } from 'vitest';
import { RepeatedErrorLog, StreamTrouble } from '../../src/cdc/standby.js';
import { relaySourceFlags } from '../../src/cli/relay.js';
import { logRecorder } from '../helpers/log-recorder.js';

describe('--source', () => {
  it('takes poll and cdc in any case and with spaces', () => {
    for (const source of ['CDC', 'Cdc', ' cdc', 'cdc ']) {
      expect(relaySourceFlags({ source })).toEqual({ kind: 'cdc', deprecated: false });
    }
    expect(relaySourceFlags({ source: 'POLL' })).toEqual({ kind: 'poll', deprecated: false });
  });

  it('refuses a bare word, naming --ce-source; a URI-reference with a scheme or a path is the deprecated CloudEvents source', () => {
    for (const source of ['cdcc', 'orders', 'kafka']) {
      expect(() => relaySourceFlags({ source })).toThrow(/--ce-source/);
    }
    for (const source of ['urn:orders', 'https://orders.example.com', '/orders']) {
      expect(relaySourceFlags({ source })).toMatchObject({
        kind: 'poll',
        ceSource: source,
        deprecated: true,
      });
    }
  });
});

describe('StreamTrouble', () => {
  it('yields only after failing for longer than a lease without a delivery, then stands by 1–2 leases', () => {
    let now = 0;
    const t = new StreamTrouble(3000, () => now);
    expect(t.yield).toBe(false);
    t.failed();
    now = 2000;
    t.failed();
    expect(t.yield).toBe(false);
    t.delivered();
    now = 10_000;
    expect(t.yield).toBe(false);
    t.failed();
    now = 13_001;
    expect(t.yield).toBe(true);
    expect(t.standbyMs(() => 0)).toBe(3000);
    expect(t.yield).toBe(false);
    expect(t.standbyMs(() => 0.999)).toBeLessThan(6000);
  });
});

describe('RepeatedErrorLog', () => {
  it('says a repeated error once with its stack, then a reminder every 30 s without one', () => {
    let now = 0;
    const { lines, logger } = logRecorder();
    const log = new RepeatedErrorLog(logger, { relayId: 'r' }, 30_000, () => now);
    const error = Object.assign(new Error('must be superuser or replication role'), { code: '42501' });
    for (let i = 0; i < 20; i++) {
      log.report(error, 'CDC stream ended; reconnecting');
      now += 1000;
    }
    const errors = lines.filter((l) => l.level === 'error');
    expect(errors).toHaveLength(1);
    expect(errors[0]!.obj['err']).toBe(error);
    now = 31_000;
    log.report(error, 'CDC stream ended; reconnecting');
    const again = lines.filter((l) => l.level === 'error');
    expect(again).toHaveLength(2);
    expect(again[1]!.obj['err']).toBeUndefined();
    expect(again[1]!.obj).toMatchObject({ attempts: 21, code: '42501' });
    log.cleared();
    expect(lines.at(-1)!.level).toBe('info');
  });
});
