import { describe, expect, it } from 'vitest';
import type { RelayHealth } from '../../src/core/relay-health.js';
import { readinessBody } from '../../src/ops/http.js';
import { judge } from '../../src/ops/readiness.js';

const healthy: RelayHealth = {
  relayId: 'r1',
  schema: 'outbox',
  publisher: 'nats',
  running: true,
  partitions: 2,
  brokerUnavailableSince: undefined,
  lastError: undefined,
  loopErrorsInARow: 0,
};
const reachable = { ok: true, detail: 'reachable', unowned: 0, total: 8 };

describe('readiness judge', () => {
  it('checks only the database without a relay', () => {
    const report = judge({ ok: true, detail: 'reachable' }, undefined);
    expect(report).toMatchObject({ ready: true, failing: [] });
    expect(Object.keys(report.checks)).toEqual(['database']);
  });

  it('is ready holding partitions even while others have no owner', () => {
    const report = judge({ ...reachable, unowned: 3 }, healthy);
    expect(report.ready).toBe(true);
    expect(report.checks.partitions?.detail).toBe('holds 2 of 8 partitions');
  });

  it('names every failing check, in a fixed order', () => {
    const report = judge(
      { ok: false, detail: 'unreachable: ECONNREFUSED' },
      { ...healthy, running: false, partitions: 0, brokerUnavailableSince: new Date('2026-01-01T00:00:00Z') },
    );
    expect(report.ready).toBe(false);
    expect(report.failing).toEqual(['database', 'relay', 'broker', 'partitions']);
    expect(report.checks.broker?.detail).toBe(
      'nats: unreachable since 2026-01-01T00:00:00.000Z (publishes refused)',
    );
    expect(report.checks.partitions?.detail).toBe(
      'holds no partition, and whether others own them all is unknown',
    );
  });

  it('a relay whose loop keeps failing (a statement refused again and again) is not ready', () => {
    const failing = { ...healthy, loopErrorsInARow: 3, lastError: 'permission denied for table deliveries' };
    const report = judge(reachable, failing);
    expect(report.failing).toEqual(['relay']);
    expect(report.checks.relay?.detail).toBe(
      'its loop failed 3 times in a row: permission denied for table deliveries',
    );
    expect(judge(reachable, { ...failing, loopErrorsInARow: 2 }).ready).toBe(true);
  });

  it('a standby is ready only when no partition lacks a live owner', () => {
    const standby = { ...healthy, partitions: 0 };
    expect(judge(reachable, standby).ready).toBe(true);
    const unowned = judge({ ...reachable, unowned: 1 }, standby);
    expect(unowned.failing).toEqual(['partitions']);
  });

  it('holding partitions, a database outage still fails only the database check', () => {
    const report = judge({ ok: false, detail: 'unreachable: timeout' }, healthy);
    expect(report.failing).toEqual(['database']);
    expect(report.checks.partitions?.ok).toBe(true);
  });

  it('the body says starting before the first check', () => {
    expect(readinessBody({ ready: false, checkedAt: undefined, failing: [], checks: {} })).toEqual({
      status: 'starting',
      checkedAt: null,
      failing: [],
      checks: {},
    });
  });
});
