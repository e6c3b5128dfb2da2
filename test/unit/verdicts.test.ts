import { describe, expect, it } from 'vitest';
import { PublishError } from '../../src/errors.js';
import type { OutboxMessage } from '../../src/publishers/contract.js';
import { type FailedOutcome, judge, MAX_ERROR_CHARS } from '../../src/relay/verdicts.js';
import { logRecorder } from '../helpers/log-recorder.js';

function message(attempts: number): OutboxMessage {
  return {
    id: '42',
    eventId: '0190f5a4-8d3c-7bbb-9b1e-000000000042',
    aggregateType: 'order',
    aggregateId: 'o-1',
    sequence: 1,
    type: 'order.placed',
    schemaVersion: 1,
    topic: null,
    payload: Buffer.from('{}'),
    contentType: 'application/json',
    headers: {},
    createdAt: new Date(0),
    attempts,
  };
}

const failure = (text: string, retryable: boolean, retryAfterMs?: number): FailedOutcome =>
  retryAfterMs === undefined
    ? { ok: false, retryable, error: new PublishError(text, { retryable }) }
    : { ok: false, retryable, error: new PublishError(text, { retryable }), retryAfterMs };

function policy(random = () => 0.5) {
  const { lines, logger } = logRecorder();
  return {
    lines,
    policy: { maxAttempts: 5, backoff: { baseMs: 1000, capMs: 60_000 }, random, logger, relayId: 'r1' },
  };
}

describe('judge', () => {
  it('retries a retryable failure with full-jitter backoff, and says so', () => {
    const { lines, policy: p } = policy(() => 0.5);
    // attempt 3 (2 made before): jitter from [0, 1000 * 2^2]
    expect(judge(message(2), failure('nack', true), p)).toEqual({
      id: '42',
      status: 'pending',
      delayMs: 2000,
      error: 'nack',
      reason: 'retryable',
    });
    expect(lines).toEqual([
      {
        level: 'warn',
        msg: 'publish failed; will retry',
        obj: { relayId: 'r1', eventId: message(0).eventId, attempts: 3, retryInMs: 2000, error: 'nack' },
      },
    ]);
  });

  it("waits the publisher's retryAfterMs when it is longer than the jitter, never past the cap", () => {
    const { policy: p } = policy(() => 0.5);
    expect(judge(message(0), failure('429', true, 7000), p).delayMs).toBe(7000);
    expect(judge(message(0), failure('429', true, 10), p).delayMs).toBe(500);
    expect(judge(message(0), failure('429', true, 3_600_000), p).delayMs).toBe(60_000);
  });

  it('marks the event dead on its last attempt', () => {
    const { lines, policy: p } = policy();
    expect(judge(message(4), failure('nack', true), p)).toEqual({
      id: '42',
      status: 'dead',
      delayMs: 0,
      error: 'nack',
      reason: 'max_attempts',
    });
    expect(lines).toEqual([
      {
        level: 'error',
        msg: 'event is dead; it blocks its aggregate until replayed',
        obj: { relayId: 'r1', eventId: message(0).eventId, attempts: 5, error: 'nack' },
      },
    ]);
  });

  it('marks the event dead at once on a permanent error, and says it is permanent', () => {
    const { policy: p } = policy();
    expect(judge(message(0), failure('schema rejected', false, 5000), p)).toEqual({
      id: '42',
      status: 'dead',
      delayMs: 0,
      error: 'permanent: schema rejected',
      reason: 'permanent',
    });
  });

  it('keeps secrets out of last_error and the log line, and cuts it to MAX_ERROR_CHARS', () => {
    const { lines, policy: p } = policy();
    const verdict = judge(
      message(0),
      failure('POST https://user:hunter2@hooks.example/x?token=abc failed', true),
      p,
    );
    expect(verdict.error).not.toMatch(/hunter2|abc/);
    expect(verdict.error).toMatch(/hooks\.example/);
    expect(JSON.stringify(lines)).not.toMatch(/hunter2/);
    const long = judge(message(0), failure('x'.repeat(10_000), false), p);
    expect(long.error).toHaveLength(MAX_ERROR_CHARS);
    expect(long.error.startsWith('permanent: x')).toBe(true);
  });
});
