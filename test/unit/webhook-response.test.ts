import { describe, expect, it } from 'vitest';
import { BROKER_UNAVAILABLE, isBrokerUnavailable } from '../../src/errors.js';
import { UNREACHABLE_CODES } from '../../src/network-errors.js';
import type { PublishOutcome } from '../../src/publishers/contract.js';
import {
  abortOutcome,
  drain,
  ERROR_BODY_CHARS,
  isRetryableStatus,
  networkOutcome,
  parseRetryAfter,
  silentOrigin,
  statusOutcome,
} from '../../src/publishers/webhook/response.js';

const endpoint = {
  label: 'https://hooks.example/in?token=***',
  scrub: (text: string) => text.replaceAll('s3cret', '***'),
};

function failure(outcome: PublishOutcome) {
  if (outcome.ok) throw new Error('expected a failed outcome');
  return outcome;
}

function response(status: number, body = '', headers: Record<string, string> = {}): Response {
  return new Response(status === 204 ? null : body, { status, statusText: 'Text', headers });
}

describe('parseRetryAfter', () => {
  const now = Date.parse('2030-01-01T00:00:00Z');
  it.each([
    [null, undefined],
    ['7', 7_000],
    [' 0 ', 0],
    ['Tue, 01 Jan 2030 00:00:30 GMT', 30_000],
    ['Mon, 31 Dec 2029 23:59:00 GMT', 0],
    ['soon', undefined],
    // Not delay-seconds; Date.parse reads it as the year -5, long past: retry at once (today's behaviour).
    ['-5', 0],
  ])('reads %j as %j ms', (value, expected) => {
    expect(parseRetryAfter(value, now)).toBe(expected);
  });
});

describe('statusOutcome', () => {
  it('classifies statuses: 2xx delivered, 408/429/5xx retryable, other 3xx/4xx permanent', () => {
    const verdict = (status: number) => {
      const outcome = statusOutcome(response(status), endpoint, '');
      return outcome.ok ? 'ok' : outcome.retryable ? 'retry' : 'permanent';
    };
    expect([200, 204, 299, 301, 400, 404, 408, 422, 429, 500, 503].map(verdict)).toEqual([
      'ok',
      'ok',
      'ok',
      'permanent',
      'permanent',
      'permanent',
      'retry',
      'permanent',
      'retry',
      'retry',
      'retry',
    ]);
    expect([407, 409, 499].every((s) => !isRetryableStatus(s))).toBe(true);
  });

  it('marks 502, 503 and 504 as the receiver being unavailable, not 500', () => {
    for (const status of [502, 503, 504]) {
      expect(isBrokerUnavailable(failure(statusOutcome(response(status), endpoint, '')).error)).toBe(true);
    }
    expect(isBrokerUnavailable(failure(statusOutcome(response(500), endpoint, '')).error)).toBe(false);
  });

  it('names the endpoint, the status and the scrubbed body, and explains redirects', () => {
    const { error } = failure(statusOutcome(response(404), endpoint, 'no s3cret here'));
    expect(error.message).toBe(
      'Webhook POST https://hooks.example/in?token=*** answered HTTP 404 Text: no *** here',
    );
    const redirect = failure(statusOutcome(response(302), endpoint, ''));
    expect(redirect.error.message).toContain('redirects are not followed');
  });

  it('takes Retry-After on retryable answers only', () => {
    const busy = failure(statusOutcome(response(429, '', { 'retry-after': '3' }), endpoint, ''));
    expect(busy).toMatchObject({ retryable: true, retryAfterMs: 3_000 });
    expect(busy.error).toMatchObject({ retryAfterMs: 3_000 });
    const bad = failure(statusOutcome(response(400, '', { 'retry-after': '3' }), endpoint, ''));
    expect(bad.retryAfterMs).toBeUndefined();
  });
});

describe('drain', () => {
  it('returns the start of the body, whitespace folded, cut at ERROR_BODY_CHARS', async () => {
    expect(await drain(response(500, '  a\n\n b  '))).toBe('a b');
    expect(await drain(response(204))).toBe('');
    const long = await drain(response(500, 'x'.repeat(5_000)));
    expect(long).toBe(`${'x'.repeat(ERROR_BODY_CHARS)}…`);
  });
});

describe('abortOutcome and silentOrigin', () => {
  it('words each cause, all retryable', () => {
    const message = (cause: 'caller' | 'closed' | 'timeout') =>
      failure(abortOutcome(cause, endpoint, 250)).error.message;
    expect(message('caller')).toBe(`Webhook POST ${endpoint.label} was aborted by the caller's signal`);
    expect(message('closed')).toBe(
      `Webhook POST ${endpoint.label} was aborted because the webhook publisher was closed`,
    );
    expect(message('timeout')).toBe(
      `Webhook POST ${endpoint.label} timed out after 250 ms (option \`timeoutMs\`)`,
    );
    expect(failure(abortOutcome('timeout', endpoint, 250)).retryable).toBe(true);
    expect(isBrokerUnavailable(failure(abortOutcome('timeout', endpoint, 250)).error)).toBe(false);
  });

  it('makes a timed-out request to a silent origin BROKER_UNAVAILABLE, keeping the timeout as cause', () => {
    const timedOut = abortOutcome('timeout', endpoint, 250);
    const silent = failure(silentOrigin(timedOut, 'https://hooks.example'));
    expect(silent.retryable).toBe(true);
    expect(silent.error).toMatchObject({ code: BROKER_UNAVAILABLE, cause: failure(timedOut).error });
    expect(silent.error.message).toBe(
      `${failure(timedOut).error.message}; no response from https://hooks.example since it was sent: the connection is in doubt`,
    );
    expect(silentOrigin({ ok: true }, 'https://hooks.example')).toEqual({ ok: true });
  });
});

describe('networkOutcome', () => {
  const fetchFailed = (cause: unknown) => new TypeError('fetch failed', { cause });
  const withCode = (message: string, code: string) => Object.assign(new Error(message), { code });

  it('is retryable, shows the cause and its code, and scrubs it', () => {
    const { error, retryable } = failure(
      networkOutcome(fetchFailed(withCode('boom s3cret', 'EPROTO')), endpoint),
    );
    expect(retryable).toBe(true);
    expect(error.message).toBe(`Webhook POST ${endpoint.label} failed: boom *** (EPROTO)`);
    expect(isBrokerUnavailable(error)).toBe(false);
  });

  // What the webhook counted as unreachable before it used src/network-errors.ts: still all of them.
  const before =
    'ECONNREFUSED ECONNRESET EHOSTUNREACH ENETUNREACH ENOTFOUND EAI_AGAIN UND_ERR_SOCKET UND_ERR_CONNECT_TIMEOUT';

  it('counts every code it counted before, and EPIPE and ETIMEDOUT now too', () => {
    expect([...UNREACHABLE_CODES]).toEqual(
      expect.arrayContaining([...before.split(' '), 'EPIPE', 'ETIMEDOUT']),
    );
  });

  it.each([...UNREACHABLE_CODES])('%s is the endpoint being unreachable', (code) => {
    expect(
      isBrokerUnavailable(failure(networkOutcome(fetchFailed(withCode('x', code)), endpoint)).error),
    ).toBe(true);
  });

  it('finds an unreachable code deeper in the cause chain (an AggregateError of connect attempts)', () => {
    const attempts = new AggregateError(
      [withCode('v6', 'ENETUNREACH'), withCode('v4', 'ECONNREFUSED')],
      'connect',
    );
    const { error } = failure(networkOutcome(fetchFailed(attempts), endpoint));
    expect(isBrokerUnavailable(error)).toBe(true);
    expect(error.message).toBe(`Webhook POST ${endpoint.label} failed: connect`);
  });

  it('takes a non-Error rejection as it is', () => {
    const { error } = failure(networkOutcome('weird', endpoint));
    expect(error.message).toBe(`Webhook POST ${endpoint.label} failed: weird`);
    expect(isBrokerUnavailable(error)).toBe(false);
  });
});
