// Build once: a step's inputs are hashed when it runs, and a later `ensure` runs the step again only
// when they changed, so `npm run bench` and `npm run chaos` after `npm test` reuse its dist/ and
// generated Prisma clients instead of building them again.
//
//   node scripts/fresh.mjs record build|prisma        # at the end of the step: its inputs' hash
//   node scripts/fresh.mjs ensure build [prisma]      # run each step whose inputs changed (or never ran)
//   node scripts/fresh.mjs forget build|prisma        # at the start of the step (a half-done step is stale)
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Each step: what it reads, what it must have left behind, the npm script that runs it. */
const STEPS = {
  build: {
    script: 'build',
    inputs: [
      'src',
      'tsconfig.json',
      'tsconfig.build.json',
      'scripts/clean-dist.mjs',
      'scripts/embed-sql.mjs',
      'scripts/copy-sql.mjs',
      'node_modules/typescript/package.json',
    ],
    outputs: ['dist/index.js', 'dist/cli/main.js'],
  },
  prisma: {
    script: 'generate:prisma',
    inputs: [
      'test/adapters/prisma/schema.prisma',
      'bench/prisma/schema.prisma',
      'node_modules/prisma/package.json',
      'node_modules/@prisma/client/package.json',
    ],
    outputs: ['.tmp/prisma-client', '.tmp/prisma-bench'],
  },
};

const stampOf = (name) => join(root, '.tmp', `fresh-${name}.sha256`);

function filesOf(path) {
  const full = join(root, path);
  if (!existsSync(full)) return [];
  if (!statSync(full).isDirectory()) return [path];
  return readdirSync(full, { recursive: true, encoding: 'utf8' })
    .map((f) => join(path, f))
    .filter((f) => statSync(join(root, f)).isFile());
}

function hashOf(step) {
  const hash = createHash('sha256');
  for (const file of step.inputs.flatMap(filesOf).sort()) {
    hash.update(`${relative(root, join(root, file))}\0`);
    hash.update(readFileSync(join(root, file)));
    hash.update('\0');
  }
  return hash.digest('hex');
}

function isFresh(name) {
  const step = STEPS[name];
  if (!step.outputs.every((o) => existsSync(join(root, o)))) return false;
  try {
    return readFileSync(stampOf(name), 'utf8').trim() === hashOf(step);
  } catch {
    return false;
  }
}

const [command, ...names] = process.argv.slice(2);
const unknown = names.filter((n) => !(n in STEPS));
if (!['record', 'ensure', 'forget'].includes(command) || names.length === 0 || unknown.length > 0) {
  console.error(`usage: node scripts/fresh.mjs record|ensure|forget ${Object.keys(STEPS).join('|')}…`);
  process.exit(2);
}
for (const name of names) {
  if (command === 'forget') rmSync(stampOf(name), { force: true });
  else if (command === 'record') {
    mkdirSync(join(root, '.tmp'), { recursive: true });
    writeFileSync(stampOf(name), `${hashOf(STEPS[name])}\n`);
  } else if (isFresh(name)) {
    console.error(
      `${name}: up to date with its inputs, not run again (npm run ${STEPS[name].script} forces it)`,
    );
  } else {
    const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
    const run = spawnSync(npm, ['run', STEPS[name].script], { cwd: root, stdio: 'inherit' });
    if (run.status !== 0) process.exit(run.status ?? 1);
  }
}
