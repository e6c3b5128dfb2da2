import { describe, expect, it } from 'vitest';
import { KeyedQueue } from '../../src/consumers/keyed-queue.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('KeyedQueue', () => {
  it('keeps one key in order and never runs two of it at once, while other keys run in parallel', async () => {
    const q = new KeyedQueue(4);
    const log: string[] = [];
    let active = 0;
    let peak = 0;
    const task = (key: string, n: number, ms: number) =>
      q.run(key, async () => {
        active += 1;
        peak = Math.max(peak, active);
        log.push(`${key}${n}:start`);
        await sleep(ms);
        log.push(`${key}${n}:end`);
        active -= 1;
      });
    await Promise.all([task('a', 1, 30), task('a', 2, 1), task('b', 1, 5), task('a', 3, 1), task('c', 1, 5)]);
    const a = log.filter((l) => l.startsWith('a'));
    expect(a).toEqual(['a1:start', 'a1:end', 'a2:start', 'a2:end', 'a3:start', 'a3:end']);
    expect(peak).toBeGreaterThan(1);
  });

  it('bounds concurrency and survives a failing task', async () => {
    const q = new KeyedQueue(2);
    let active = 0;
    let peak = 0;
    const results = await Promise.allSettled(
      Array.from({ length: 10 }, (_, i) =>
        q.run(`k${i}`, async () => {
          active += 1;
          peak = Math.max(peak, active);
          await sleep(5);
          active -= 1;
          if (i === 3) throw new Error('boom');
          return i;
        }),
      ),
    );
    expect(peak).toBe(2);
    expect(results.filter((r) => r.status === 'rejected')).toHaveLength(1);
    expect(await q.run('k3', async () => 'after')).toBe('after');
  });
});
