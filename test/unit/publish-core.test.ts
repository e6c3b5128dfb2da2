import { describe, expect, it, vi } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { unreachableCode } from '../../src/network-errors.js';
import { renamedOptions, secondsToMs } from '../../src/options/renamed.js';
import { CallAbort } from '../../src/publishers/core/call-abort.js';
import { closeWithin, PublisherLifecycle } from '../../src/publishers/core/lifecycle.js';
import { acquireSlot, Slots } from '../../src/publishers/core/slots.js';

describe('CallAbort', () => {
  it('passes the caller reason through as given, once, to listeners, signal and race', async () => {
    const caller = new AbortController();
    const abort = new CallAbort({ signal: caller.signal });
    const seen: unknown[] = [];
    abort.onAbort((cause, reason) => seen.push(cause, reason));
    const raced = abort.race(new Promise(() => undefined));
    const reason = new Error('relay stopped');
    caller.abort(reason);
    caller.abort(new Error('again'));
    await expect(raced).rejects.toBe(reason);
    expect(seen).toEqual(['caller', reason]);
    expect(abort.signal.reason).toBe(reason);
    expect(abort.cause).toBe('caller');
    abort.dispose();
  });

  it('times out with a TimeoutError carrying the given message', async () => {
    vi.useFakeTimers();
    try {
      const abort = new CallAbort({
        signal: new AbortController().signal,
        timeoutMs: 50,
        timeoutMessage: 'late',
      });
      const raced = abort.race(new Promise(() => undefined));
      vi.advanceTimersByTime(49);
      expect(abort.cause).toBeUndefined();
      vi.advanceTimersByTime(1);
      await expect(raced).rejects.toMatchObject({ name: 'TimeoutError', message: 'late' });
      expect(abort.cause).toBe('timeout');
    } finally {
      vi.useRealTimers();
    }
  });

  it('aborts with `closed` when the publisher closes, and at once when a signal already aborted', async () => {
    const life = new PublisherLifecycle('Test');
    const abort = new CallAbort({ signal: new AbortController().signal, closing: life.closing });
    const done = life.close(async () => undefined);
    expect(abort.cause).toBe('closed');
    await done;
    expect(() => life.assertOpen()).toThrow(/The Test publisher is closed/);
    const late = new CallAbort({ signal: AbortSignal.abort('x'), closing: life.closing });
    expect(late.cause).toBe('caller');
    let heard = '';
    late.onAbort((cause) => {
      heard = cause;
    });
    expect(heard).toBe('caller');
    await expect(late.aborted).rejects.toBe('x');
  });

  it('dispose removes the listeners on the caller and the timer', () => {
    const caller = new AbortController();
    const add = vi.spyOn(caller.signal, 'addEventListener');
    const remove = vi.spyOn(caller.signal, 'removeEventListener');
    const abort = new CallAbort({ signal: caller.signal, timeoutMs: 10_000 });
    abort.dispose();
    expect(add).toHaveBeenCalledTimes(1);
    expect(remove).toHaveBeenCalledWith('abort', add.mock.calls[0]![1]);
    caller.abort();
    expect(abort.cause).toBeUndefined();
  });
});

describe('acquireSlot', () => {
  it('refuses at once when aborted and cancels a wait when the call aborts', async () => {
    const slots = new Slots(1);
    const caller = new AbortController();
    const abort = new CallAbort({ signal: caller.signal });
    expect(await acquireSlot(slots, abort)).toBe(true);
    const waiting = acquireSlot(slots, abort);
    caller.abort();
    expect(await waiting).toBe(false);
    expect(await acquireSlot(slots, abort)).toBe(false);
  });
});

describe('closeWithin', () => {
  it('is true for a close that settles in time (even by failing), false for one that hangs', async () => {
    expect(await closeWithin(Promise.reject(new Error('x')), 1000)).toBe(true);
    expect(await closeWithin(new Promise(() => undefined), 20)).toBe(false);
  });
});

describe('unreachableCode', () => {
  it('finds the code on the error, its cause chain and AggregateError members', () => {
    const inner = Object.assign(new Error('connect'), { code: 'ECONNREFUSED' });
    expect(unreachableCode(new Error('fetch failed', { cause: inner }))).toBe('ECONNREFUSED');
    expect(unreachableCode(new AggregateError([new Error('a'), inner]))).toBe('ECONNREFUSED');
    expect(unreachableCode(Object.assign(new Error('x'), { code: 'EACCES' }))).toBeUndefined();
  });
});

describe('renamedOptions', () => {
  it('moves an old spelling to its new name with one DeprecationWarning, and refuses both', () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const given = { servers: 'nats://h', stream: 'S' };
      const out = renamedOptions('natsPublisher (test)', given, { servers: 'url' });
      expect(out).toEqual({ url: 'nats://h', stream: 'S' });
      expect(given).toEqual({ servers: 'nats://h', stream: 'S' });
      renamedOptions('natsPublisher (test)', given, { servers: 'url' });
      expect(warn).toHaveBeenCalledTimes(1);
      expect(String(warn.mock.calls[0]![0])).toMatch(/`servers` is deprecated, use `url`/);
      expect(() => renamedOptions('x', { servers: 'a', url: 'b' }, { servers: 'url' })).toThrow(
        OutboxValidationError,
      );
      const same = { url: 'a' };
      expect(renamedOptions('x', same, { servers: 'url' })).toBe(same);
    } finally {
      warn.mockRestore();
    }
  });

  it('converts an old spelling of another unit, saying so in the warning', () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const renames = { windowSeconds: secondsToMs('windowMs') };
      expect(renamedOptions('c (test)', { windowSeconds: 2 }, renames)).toEqual({ windowMs: 2000 });
      expect(renamedOptions('c (test)', { windowSeconds: 'x' }, renames)).toEqual({ windowMs: 'x' });
      expect(renamedOptions('c (test)', { windowMs: 5 }, renames)).toEqual({ windowMs: 5 });
      expect(warn).toHaveBeenCalledTimes(1);
      expect(String(warn.mock.calls[0]![0])).toMatch(
        /^c \(test\): option `windowSeconds` is deprecated, use `windowMs` \(in milliseconds: the seconds × 1000\)/,
      );
      expect(() => renamedOptions('c (test)', { windowSeconds: 1, windowMs: 1 }, renames)).toThrow(
        /^windowSeconds: is the deprecated spelling of `windowMs`/,
      );
    } finally {
      warn.mockRestore();
    }
  });
});

describe('the root export', () => {
  it('gives a third-party publisher what the contract needs, and no internal helpers', async () => {
    const root: Record<string, unknown> = await import('../../src/index.js');
    for (const name of [
      'BROKER_UNAVAILABLE',
      'brokerUnavailable',
      'isBrokerUnavailable',
      'DELIVERED',
      'failed',
      'permanent',
      'PUBLISHER_CLOSED',
      'publisherClosed',
      'isPublisherClosed',
      'PublishError',
      'envelopeHeaders',
      'defaultDestination',
    ]) {
      expect(root[name], name).toBeDefined();
    }
    const closed = (root.publisherClosed as (b: string) => Error)('Acme');
    expect((root.isPublisherClosed as (e: unknown) => boolean)(closed)).toBe(true);
    expect(root.fullJitterDelay).toBeUndefined();
    expect(root.assertInTransaction).toBeUndefined();
  });
});
