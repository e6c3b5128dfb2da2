import { describe, expect, it } from 'vitest';
import { InFlight } from '../../src/publishers/core/in-flight.js';

function deferred<T>(): { promise: Promise<T>; resolve(value: T): void; reject(error: unknown): void } {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('InFlight', () => {
  it('counts a call until it settles, resolved or rejected, and hands the call back as is', async () => {
    const calls = new InFlight();
    const a = deferred<number>();
    const b = deferred<number>();
    expect(calls.track(a.promise)).toBe(a.promise);
    const tracked = calls.track(b.promise);
    expect(calls.size).toBe(2);
    a.resolve(1);
    await tick();
    expect(calls.size).toBe(1);
    b.reject(new Error('boom'));
    await expect(tracked).rejects.toThrow('boom');
    expect(calls.size).toBe(0);
  });

  it('settled() waits for the calls running now, never rejects, and ignores later ones', async () => {
    const calls = new InFlight();
    const a = deferred<void>();
    calls.track(a.promise).catch(() => undefined);
    let settled = false;
    const waiting = calls.settled().then(() => {
      settled = true;
    });
    const later = deferred<void>();
    calls.track(later.promise);
    await tick();
    expect(settled).toBe(false);
    a.reject(new Error('failed call'));
    await waiting;
    expect(settled).toBe(true);
    expect(calls.size).toBe(1);
    later.resolve();
    await expect(new InFlight().settled()).resolves.toBeUndefined();
  });
});
