import { describe, expect, it } from 'vitest';
import { formatCdcLines } from '../../src/cli/cdc.js';
import { CliError } from '../../src/cli/common.js';
import { cdcFlags, relaySourceFlags } from '../../src/cli/relay.js';

describe('relay --source / --ce-source', () => {
  it('poll and cdc pick the relay; anything else is the deprecated CloudEvents source', () => {
    expect(relaySourceFlags({})).toEqual({ kind: 'poll', deprecated: false });
    expect(relaySourceFlags({ source: 'cdc' })).toEqual({ kind: 'cdc', deprecated: false });
    expect(relaySourceFlags({ source: 'poll', ceSource: 'urn:x' })).toEqual({
      kind: 'poll',
      ceSource: 'urn:x',
      ceSourceFlag: '--ce-source',
      deprecated: false,
    });
    expect(relaySourceFlags({ source: 'https://x' })).toEqual({
      kind: 'poll',
      ceSource: 'https://x',
      ceSourceFlag: '--source',
      deprecated: true,
    });
    expect(() => relaySourceFlags({ source: 'https://x', ceSource: 'https://y' })).toThrow(CliError);
  });

  it('CDC durations: parsed, and the silence timeout must outlast the heartbeat', () => {
    expect(cdcFlags({})).toEqual({});
    expect(cdcFlags({ acceptWalFormat1: true })).toEqual({ acceptWalFormat1: true });
    expect(cdcFlags({ heartbeat: '2s', silenceTimeout: '10s', slot: 's' })).toEqual({
      slot: 's',
      heartbeatMs: 2000,
      silenceTimeoutMs: 10_000,
    });
    expect(() => cdcFlags({ heartbeat: '30s' })).toThrow(/must be longer than --heartbeat \(30000 ms\)/);
    expect(() => cdcFlags({ silenceTimeout: '5s' })).toThrow(
      /\(5000 ms\) must be longer than --heartbeat \(10000 ms\)/,
    );
    expect(() => cdcFlags({ heartbeat: 'soon' })).toThrow(/--heartbeat needs a duration/);
  });
});

describe('formatCdcLines', () => {
  const base = {
    slot: 'txo_orders',
    publication: 'txo_orders',
    exists: true,
    active: true,
    activePid: 4242,
    walStatus: 'reserved',
    confirmedLsn: '0/16B3748',
    lagBytes: 3 * 1024 * 1024,
    lagSeconds: 0.25,
    measuredAt: new Date('2026-01-01T00:00:00Z'),
    retainedBytes: 512,
  };

  it('shows streaming, LSN, lag and retained WAL', () => {
    const text = formatCdcLines(base).join('\n');
    expect(text).toMatch(/streaming +yes \(walsender PID 4242\)/);
    expect(text).toMatch(/confirmed LSN +0\/16B3748/);
    expect(text).toMatch(/lag +3\.0 MiB, 0\.3 s \(measured 2026-01-01T00:00:00\.000Z\)/);
    expect(text).toMatch(/WAL retained +512 B/);
  });

  it('says when the slot is lost, and when there is none', () => {
    expect(formatCdcLines({ ...base, walStatus: 'lost' })[0]).toMatch(
      /LOST: events after the confirmed LSN may be missing/,
    );
    expect(formatCdcLines({ ...base, exists: false })).toEqual([
      '  slot                 txo_orders: none (tx-outbox migrate --cdc creates it)',
    ]);
  });
});
