import { afterEach, describe, expect, it, vi } from 'vitest';
import { isBrokerUnavailable, OutboxError } from '../../src/errors.js';
import type { PublishOutcome } from '../../src/publishers/contract.js';
import { webhookPublisher } from '../../src/publishers/webhook/index.js';
import { makeMessage } from '../helpers/messages.js';

// The webhook publisher's waits and aborts, with fetch stubbed: no server needed.

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

type Answer = (url: URL, signal: AbortSignal) => Promise<Response>;

function stubFetch(answer: Answer): { readonly sent: URL[] } {
  const sent: URL[] = [];
  vi.stubGlobal('fetch', (url: URL, init: RequestInit) => {
    sent.push(url);
    return answer(url, init.signal!);
  });
  return { sent };
}

/** Answers 204 after `ms`, or rejects with the signal's reason when it aborts first. */
function answerAfter(ms: number | undefined): Answer {
  return (_url, signal) =>
    new Promise<Response>((resolve, reject) => {
      const timer =
        ms === undefined ? undefined : setTimeout(() => resolve(new Response(null, { status: 204 })), ms);
      signal.addEventListener('abort', () => {
        clearTimeout(timer);
        reject(signal.reason);
      });
    });
}

function message(outcome: PublishOutcome | undefined): string {
  if (outcome === undefined || outcome.ok)
    throw new Error(`expected a failure, got ${JSON.stringify(outcome)}`);
  return outcome.error.message;
}

afterEach(() => {
  vi.unstubAllGlobals();
});

describe('webhookPublisher waits and aborts', () => {
  it('times the request only, not the wait for an in-flight slot', async () => {
    // Eight requests of 100 ms one at a time: the last waits 700 ms for its slot, past the 500 ms
    // timeout, while each request stays 400 ms under it (room for a loaded machine's timers; 40 ms
    // answers against a 100 ms timeout failed there).
    stubFetch(answerAfter(100));
    const publisher = webhookPublisher({
      endpoints: 'http://h.test/',
      secret: SECRET,
      timeoutMs: 500,
      maxInFlight: 1,
    });
    const outcomes = await publisher.publish(
      Array.from({ length: 8 }, () => makeMessage()),
      new AbortController().signal,
    );
    expect(outcomes).toEqual(Array.from({ length: 8 }, () => ({ ok: true })));
    await publisher.close();
  });

  it("words a caller's abort the same while waiting for a slot and while in flight", async () => {
    const { sent } = stubFetch(answerAfter(undefined));
    const publisher = webhookPublisher({ endpoints: 'http://h.test/', secret: SECRET, maxInFlight: 1 });
    const caller = new AbortController();
    const pending = publisher.publish([makeMessage(), makeMessage()], caller.signal);
    await vi.waitFor(() => expect(sent).toHaveLength(1));
    caller.abort(new Error('relay stopping'));
    const outcomes = await pending;
    expect(outcomes.map(message)).toEqual([
      "Webhook POST http://h.test/ was aborted by the caller's signal",
      "Webhook POST http://h.test/ was aborted by the caller's signal",
    ]);
    expect(sent).toHaveLength(1);
    await publisher.close();
  });

  it('words close() the same while waiting and in flight, and refuses publish() after it', async () => {
    const { sent } = stubFetch(answerAfter(undefined));
    const publisher = webhookPublisher({ endpoints: 'http://h.test/', secret: SECRET, maxInFlight: 1 });
    const pending = publisher.publish([makeMessage(), makeMessage()], new AbortController().signal);
    await vi.waitFor(() => expect(sent).toHaveLength(1));
    const closing = publisher.close();
    expect(publisher.close()).toBe(closing);
    await closing;
    const outcomes = await pending;
    for (const outcome of outcomes) {
      expect(message(outcome)).toBe(
        'Webhook POST http://h.test/ was aborted because the webhook publisher was closed',
      );
      expect(outcome.ok || outcome.retryable).toBe(true);
    }
    await expect(publisher.publish([makeMessage()], new AbortController().signal)).rejects.toSatisfy(
      (error: unknown) =>
        error instanceof OutboxError &&
        error.code === 'TXO_PUBLISHER_CLOSED' &&
        error.message ===
          'The webhook publisher is closed: publish() was called after close(). Create a new webhookPublisher to publish again.',
    );
  });

  it('an already aborted caller signal sends nothing', async () => {
    const { sent } = stubFetch(answerAfter(0));
    const publisher = webhookPublisher({ endpoints: 'http://h.test/', secret: SECRET });
    const outcomes = await publisher.publish([makeMessage()], AbortSignal.abort());
    expect(message(outcomes[0])).toContain("caller's signal");
    expect(sent).toHaveLength(0);
    await publisher.close();
  });

  it('a timeout is the origin being in doubt only when nothing was heard from it since the send', async () => {
    stubFetch((url, signal) => answerAfter(url.pathname === '/slow' ? undefined : 10)(url, signal));
    const publisher = webhookPublisher({
      endpoints: { slow: 'http://h.test/slow', '*': 'http://h.test/fast', other: 'http://other.test/x' },
      secret: SECRET,
      timeoutMs: 80,
    });
    const lone = await publisher.publish([makeMessage({ topic: 'slow' })], new AbortController().signal);
    expect(message(lone[0])).toBe(
      'Webhook POST http://h.test/slow timed out after 80 ms (option `timeoutMs`); no response from http://h.test since it was sent: the connection is in doubt',
    );
    expect(lone[0]?.ok === false && isBrokerUnavailable(lone[0].error)).toBe(true);

    const [slow, fast, other] = await publisher.publish(
      [makeMessage({ topic: 'slow' }), makeMessage(), makeMessage({ topic: 'other' })],
      new AbortController().signal,
    );
    expect(fast).toEqual({ ok: true });
    expect(other).toEqual({ ok: true });
    expect(message(slow)).toBe('Webhook POST http://h.test/slow timed out after 80 ms (option `timeoutMs`)');
    expect(slow?.ok === false && isBrokerUnavailable(slow.error)).toBe(false);
    await publisher.close();
  });
});
