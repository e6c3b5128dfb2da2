import type { NatsConnection } from '@nats-io/transport-node';
import { describe, expect, it } from 'vitest';
import { CallAbort } from '../../src/publishers/core/call-abort.js';
import { AckPipeline } from '../../src/publishers/nats/pipeline.js';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A connection that takes every publish and never answers a probe (flush, $JS.API.INFO). */
function silentConnection(): {
  nc: NatsConnection;
  reply(subject: string, code: number): void;
  flushed: Promise<void>;
} {
  let flushed!: () => void;
  const flushCalled = new Promise<void>((resolve) => {
    flushed = resolve;
  });
  let onReply: ((error: Error | null, msg: unknown) => void) | undefined;
  const replies: string[] = [];
  const nc = {
    options: {},
    isClosed: () => false,
    subscribe: (_subject: string, options: { callback: typeof onReply }) => {
      onReply = options.callback;
      return { isClosed: () => false, unsubscribe: () => undefined };
    },
    publish: (_subject: string, _payload: Uint8Array, options: { reply: string }) => {
      replies.push(options.reply);
    },
    flush: () => {
      flushed();
      return new Promise<void>(() => undefined);
    },
    request: () => new Promise<never>(() => undefined),
  } as unknown as NatsConnection;
  return {
    nc,
    flushed: flushCalled,
    reply: (subject, code) =>
      onReply?.(null, { subject: replies.at(-1) ?? subject, data: new Uint8Array(0), headers: { code } }),
  };
}

const item = { subject: 'order.paid', payload: new Uint8Array(1), headers: new Uint8Array(0) };

describe('AckPipeline.close()', () => {
  it.each([
    ['an overdue PubAck whose link probe is under way', false],
    ['a 503 whose JetStream probe is under way', true],
  ])('resolves when a disconnect settles %s', async (_case, noResponders) => {
    const { nc, reply, flushed } = silentConnection();
    // The probes wait up to timeoutMs for their answer: time enough to close and disconnect.
    const pipeline = new AckPipeline(nc, { timeoutMs: 150, maxInFlight: 4 });
    const abort = new CallAbort({ signal: new AbortController().signal });
    const outcomes = pipeline.publish([item], abort);
    if (noResponders) reply(item.subject, 503);
    else await flushed; // past the deadline: the link probe (a flush nobody answers) runs
    let closed = false;
    const closing = pipeline.close().then(() => {
      closed = true;
    });
    pipeline.disconnected(new Error('connection reset'));
    const [outcome] = await outcomes;
    expect(outcome).toMatchObject({ ok: false, retryable: true });
    await Promise.race([closing, sleep(500)]); // the probe's own deadline passes meanwhile
    expect(closed).toBe(true);
    abort.dispose();
  });
});
