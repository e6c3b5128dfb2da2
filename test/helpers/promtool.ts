import { spawnSync } from 'node:child_process';

export interface PromtoolRun {
  readonly status: number | null;
  readonly output: string;
}

const INSTALL_HINT =
  "promtool is missing: run `bash scripts/services.sh` (it installs Debian's prometheus package), " +
  'or `apt-get install -y --no-install-recommends prometheus`';

/** Runs promtool (the tests FAIL without it, with the install hint: they never skip). */
export function promtool(args: readonly string[], input?: string): PromtoolRun {
  const run = spawnSync('promtool', args, { input, encoding: 'utf8', timeout: 60_000 });
  if (run.error !== undefined) {
    if ((run.error as NodeJS.ErrnoException).code === 'ENOENT') throw new Error(INSTALL_HINT);
    throw run.error;
  }
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}
