import { join } from 'node:path';
import { defineConfig } from 'vitest/config';

/**
 * One project per folder of test/. `unit` needs no service and runs first (the fast lane:
 * `npm test` runs it alone before the others, `npx vitest run` runs its group first); the
 * projects against real services run after it, side by side:
 *
 *   npx vitest run --project unit       # seconds, no service needed
 *   npx vitest run --project '!unit'    # integration, failure, contract, adapters
 */
const project = (name: string, groupOrder: number) => ({
  extends: true as const,
  test: { name, include: [`test/${name}/**/*.test.ts`], sequence: { groupOrder } },
});

// CI writes one JSON report per vitest run into this folder; .ci/run sums them into one plain
// 'N passed, N failed, N skipped' line.
const reportDir = process.env['TXO_TEST_REPORT_DIR'];
// CI keeps the transformed modules on disk (a folder of its fresh clone), so its later vitest runs
// (the services lane, Node 22 and 24) do not transform src/ and test/ again: about a sixth of a
// run's CPU. Off by default: a developer's edits never meet a stale cache.
const moduleCache = process.env['TXO_VITEST_MODULE_CACHE'];

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 4,
    projects: [
      project('unit', 0),
      project('integration', 1),
      project('failure', 1),
      project('contract', 1),
      project('adapters', 1),
    ],
    ...(moduleCache ? { experimental: { fsModuleCache: true, fsModuleCachePath: moduleCache } } : {}),
    reporters: reportDir
      ? ['default', ['json', { outputFile: join(reportDir, `vitest-${Date.now()}-${process.pid}.json`) }]]
      : ['default'],
  },
});
