import { describe, expect, it } from 'vitest';
import { ConsumerLifecycle } from '../../src/consumers/lifecycle.js';

const deferred = <T = void>() => {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
};

/** A lifecycle on `signal` whose shutdown counts its runs. */
function counted(signal?: AbortSignal) {
  const runs = { count: 0 };
  const life = new ConsumerLifecycle(signal, async () => {
    runs.count += 1;
  });
  return { life, runs };
}

describe('ConsumerLifecycle', () => {
  it('runs the shutdown once: every stop() gets the same promise', async () => {
    const { life, runs } = counted();
    expect(life.stopping).toBe(false);
    const first = life.stop();
    expect(life.stop()).toBe(first);
    await first;
    expect(runs.count).toBe(1);
  });

  it('is stopping, with halt aborted, already while the shutdown runs', async () => {
    const seen: Array<[boolean, boolean]> = [];
    const life = new ConsumerLifecycle(undefined, async () => {
      seen.push([life.stopping, life.halt.aborted]);
    });
    expect(life.halt.aborted).toBe(false);
    await life.stop();
    expect(seen).toEqual([[true, true]]);
  });

  it('the caller signal stops it after started(), and not before', async () => {
    const controller = new AbortController();
    const { life, runs } = counted(controller.signal);
    life.started();
    controller.abort();
    expect(life.stopping).toBe(true);
    await life.stop();
    expect(runs.count).toBe(1);

    const early = new AbortController();
    const late = counted(early.signal);
    early.abort();
    expect(late.life.stopping).toBe(false);
    late.life.started(); // already aborted: stops at once
    expect(late.life.stopping).toBe(true);
    await late.life.stop();
    expect(late.runs.count).toBe(1);
  });

  it('unhooks the caller signal when stopped', async () => {
    const controller = new AbortController();
    const { life, runs } = counted(controller.signal);
    life.started();
    await life.stop();
    controller.abort();
    await life.stop();
    expect(runs.count).toBe(1);
  });

  it('counts tracked tasks and settles only when none is left, late ones included', async () => {
    const life = new ConsumerLifecycle(undefined, async () => undefined);
    const a = deferred();
    const b = deferred();
    life.track(a.promise);
    expect(life.inFlight).toBe(1);
    let settled = false;
    const waiting = life.settled().then(() => {
      settled = true;
    });
    life.track(b.promise);
    a.resolve();
    await a.promise;
    await Promise.resolve();
    expect(settled).toBe(false);
    expect(life.inFlight).toBe(1);
    b.resolve();
    await waiting;
    expect(settled).toBe(true);
    expect(life.inFlight).toBe(0);
  });

  it('oneSettled resolves when any task settles', async () => {
    const life = new ConsumerLifecycle(undefined, async () => undefined);
    const [slow, fast] = [deferred(), deferred()].map((d) => {
      life.track(d.promise);
      return d;
    });
    const one = life.oneSettled();
    fast!.resolve();
    await one;
    expect(life.inFlight).toBe(1);
    slow!.resolve();
    await life.settled();
    expect(life.inFlight).toBe(0);
  });
});
