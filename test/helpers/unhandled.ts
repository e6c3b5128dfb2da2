import { afterAll, beforeAll, expect } from 'vitest';

/**
 * Collects the unhandled rejections of a test file from its first hook on, and fails the file's
 * last afterAll unless there were none. Call it at the top of the file, before its own hooks
 * (afterAll hooks run in reverse order, so this check comes after the file's own clean-up).
 */
export function expectNoUnhandledRejections(): void {
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown): void => {
    unhandled.push(reason);
  };
  beforeAll(() => {
    process.on('unhandledRejection', onUnhandled);
  });
  afterAll(() => {
    process.off('unhandledRejection', onUnhandled);
    expect(unhandled).toEqual([]);
  });
}
