/**
 * The relay's one classification of local resource exhaustion (every publisher's outcomes pass
 * through it): a failure whose error or cause chain carries EMFILE, ENFILE, ENOBUFS, ENOMEM or
 * EADDRNOTAVAIL is the host's, not the event's. The process-level proof is
 * test/failure/descriptor-flood.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { BROKER_UNAVAILABLE, isBrokerUnavailable, PublishError } from '../../src/errors.js';
import { exhaustionCode } from '../../src/network-errors.js';
import { DELIVERED, failed, type PublishOutcome } from '../../src/publishers/contract.js';
import { hostOutOfResources } from '../../src/relay/publish-batch.js';
import { PUBLISHER_FAILED } from '../../src/relay/verdicts.js';

/** A socket error as node:net makes one. */
function systemError(code: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`connect ${code} 127.0.0.1:4222 - Local (undefined:undefined)`), {
    code,
    syscall: 'connect',
  });
}

describe('hostOutOfResources', () => {
  it.each(['EMFILE', 'ENFILE', 'ENOBUFS', 'ENOMEM', 'EADDRNOTAVAIL'])(
    'judges a failure caused by %s, deep in the cause chain, as the broker unavailable (no attempt)',
    (code) => {
      // As the webhook publisher reports a fetch that could not connect: PublishError ← TypeError ← socket error.
      const fetchFailed = new TypeError('fetch failed', { cause: systemError(code) });
      const outcome = failed(
        new PublishError('Webhook POST failed', { retryable: true, cause: fetchFailed }),
        true,
      );
      const judged = hostOutOfResources(outcome);
      expect(judged.ok).toBe(false);
      if (judged.ok) return;
      expect(judged.retryable).toBe(true);
      expect(isBrokerUnavailable(judged.error)).toBe(true);
      expect((judged.error as PublishError).code).toBe(BROKER_UNAVAILABLE);
      expect(judged.error.message).toContain(`(${code}), so nothing can be sent: Webhook POST failed`);
      expect(judged.error.cause).toBe(outcome.ok ? undefined : outcome.error);
    },
  );

  it('re-judges a permanent verdict and a thrown publish call too, and finds a code in an AggregateError', () => {
    const permanent = failed(
      new PublishError('refused', { retryable: false, cause: systemError('EMFILE') }),
      false,
    );
    expect(isBrokerUnavailable((hostOutOfResources(permanent) as { error: Error }).error)).toBe(true);
    // What the relay makes of a publish call that threw (src/relay/publish-batch.ts).
    const threw = failed(
      new PublishError('publisher custom failed: spawn EMFILE', {
        retryable: true,
        code: PUBLISHER_FAILED,
        cause: systemError('EMFILE'),
      }),
      true,
    );
    expect(isBrokerUnavailable((hostOutOfResources(threw) as { error: Error }).error)).toBe(true);
    const aggregate = new AggregateError([new Error('first'), systemError('ENFILE')], 'all attempts failed');
    expect(exhaustionCode(new Error('wrapped', { cause: aggregate }))).toBe('ENFILE');
  });

  it('leaves everything else as it was: a success, another failure, an unavailable broker', () => {
    expect(hostOutOfResources(DELIVERED)).toBe(DELIVERED);
    const refused: PublishOutcome = failed(
      new PublishError('Publish failed', { retryable: true, cause: systemError('ECONNREFUSED') }),
      true,
    );
    expect(hostOutOfResources(refused)).toBe(refused);
    const unavailable = failed(
      new PublishError('down', { retryable: true, code: BROKER_UNAVAILABLE, cause: systemError('EMFILE') }),
      true,
    );
    expect(hostOutOfResources(unavailable)).toBe(unavailable);
  });

  it("reads codes, never messages: an event cannot pass its own failure off as the host's", () => {
    // A destination the producer named EMFILE, refused by the broker.
    const outcome = failed(
      new PublishError('JetStream refused subject "EMFILE": no stream (ENOMEM EADDRNOTAVAIL)', {
        retryable: false,
        cause: new Error('EMFILE: subject not captured'),
      }),
      false,
    );
    expect(hostOutOfResources(outcome)).toBe(outcome);
  });
});
