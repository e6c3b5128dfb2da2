import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 4,
    // CI also writes a JSON report, from which .ci/run prints a plain 'N passed, N failed' line.
    reporters: process.env['TXO_TEST_REPORT']
      ? ['default', ['json', { outputFile: process.env['TXO_TEST_REPORT'] }]]
      : ['default'],
  },
});
