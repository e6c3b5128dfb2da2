import type { Pool } from 'pg';
import { describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { silentLogger } from '../../src/logger.js';
import { type RelayOptions, resolveRelayOptions } from '../../src/relay/options.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

// Resolving options never connects: a stand-in with a connect() and a pool size is enough.
const pool = (max = 10) =>
  ({ connect: () => Promise.reject(new Error('no')), options: { max } }) as unknown as Pool;
const base = (extra: Partial<RelayOptions> = {}): RelayOptions => ({
  pool: pool(),
  publisher: new RecordingPublisher(),
  ...extra,
});

function refused(options: RelayOptions): OutboxValidationError {
  try {
    resolveRelayOptions(options);
  } catch (error) {
    if (error instanceof OutboxValidationError) return error;
    throw error;
  }
  throw new Error('accepted');
}

describe('relay options', () => {
  it('fill in the defaults', () => {
    const o = resolveRelayOptions(base());
    expect(o).toMatchObject({
      closePublisher: true,
      schema: 'outbox',
      quotedSchema: '"outbox"',
      batchSize: 500,
      pollIntervalMs: 1000,
      leaseMs: 15_000,
      maxAttempts: 10,
      gapGraceMs: 10_000,
      backoff: { baseMs: 1000, capMs: 300_000 },
      publishTimeoutMs: 60_000,
      outageReminderMs: 30_000,
      listen: true,
      synchronousCommit: 'off',
      logger: silentLogger,
      signal: undefined,
      random: Math.random,
    });
    expect(o.relayId).toMatch(/^.+-\d+-[0-9a-f]{8}$/);
  });

  it('end frozen, the backoff policy too', () => {
    const o = resolveRelayOptions(base({ backoff: { baseMs: 10 } }));
    expect(Object.isFrozen(o)).toBe(true);
    expect(Object.isFrozen(o.backoff)).toBe(true);
    expect(o.backoff).toEqual({ baseMs: 10, capMs: 300_000 });
  });

  it('raise a backoff cap below the base to the base', () => {
    expect(resolveRelayOptions(base({ backoff: { baseMs: 5000, capMs: 100 } })).backoff).toEqual({
      baseMs: 5000,
      capMs: 5000,
    });
  });

  it('name the field and the fix when refused', () => {
    expect(refused(base({ batchSize: 0 })).message).toBe(
      'batchSize: is 0. Pass an integer from 1 to 10000 (default 500).',
    );
    expect(refused(base({ batchSize: 10_001 })).field).toBe('batchSize');
    expect(refused(base({ maxAttempts: 1.5 })).field).toBe('maxAttempts');
    expect(refused(base({ gapGraceMs: 0 })).message).toBe(
      'gapGraceMs: is 0. Pass an integer from 1 to 2147483647 (default 10000).',
    );
    expect(refused(base({ backoff: { capMs: -1 } })).field).toBe('backoff.capMs');
    expect(refused(base({ leaseMs: 299 })).message).toMatch(/^leaseMs: is 299\. Use at least 300 ms/);
    expect(refused(base({ synchronousCommit: 'local' as 'on' })).field).toBe('synchronousCommit');
    expect(refused(base({ closePublisher: 'yes' as unknown as boolean })).field).toBe('closePublisher');
    expect(refused({ ...base(), publisher: undefined as never }).field).toBe('publisher');
    expect(refused({ ...base(), pool: undefined as never }).field).toBe('pool');
  });

  it('ask for a pool big enough for the connections the relay keeps', () => {
    expect(refused(base({ pool: pool(3) })).message).toMatch(/give it max ≥ 4/);
    expect(resolveRelayOptions(base({ pool: pool(3), listen: false })).listen).toBe(false);
    expect(refused(base({ pool: pool(2), listen: false })).message).toMatch(/give it max ≥ 3/);
  });
});
