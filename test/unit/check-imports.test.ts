/**
 * scripts/check-imports.mjs, the import-graph check of `npm run lint`, run as `npm run lint` runs
 * it, on small trees written here: it must fail on a circle, on an import that runs back up the
 * layers, on an import the rules forbid and on one that names no file, and pass a clean tree.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

const SCRIPT = join(import.meta.dirname, '../../scripts/check-imports.mjs');
const roots: string[] = [];

/** A tree of files (path → text) in a fresh directory. */
function tree(files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), 'check-imports-'));
  roots.push(root);
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  return root;
}

function check(root: string, ...args: string[]): { status: number | null; out: string } {
  const r = spawnSync(process.execPath, [SCRIPT, '--root', root, ...args], { encoding: 'utf8' });
  return { status: r.status, out: r.stdout + r.stderr };
}

afterEach(() => {
  for (const root of roots.splice(0)) rmSync(root, { recursive: true, force: true });
});

/** A small src/ whose every import runs down the layers. */
const CLEAN = {
  'src/errors.ts': 'export class E extends Error {}\n',
  'src/core/message.ts': "import type { E } from '../errors.js';\nexport interface M { e?: E }\n",
  'src/publishers/contract.ts': "export type { M } from '../core/message.js';\n",
  'src/publishers/nats/index.ts': "import type { M } from '../contract.js';\nexport const n = (m: M) => m;\n",
  'src/metrics/sink.ts': "import type { M } from '../publishers/contract.js';\nexport type S = M;\n",
  'src/relay/relay.ts': "import { n } from '../publishers/nats/index.js';\nexport const r = n;\n",
  'src/relay/polling/claim.ts': "import { r } from '../relay.js';\nexport const c = r;\n",
  'src/cdc/relay.ts': "import { r } from '../relay/relay.js';\nexport const d = r;\n",
  'src/index.ts': "export * from './cdc/relay.js';\nexport { c } from './relay/polling/claim.js';\n",
  'bench/lib.ts': "import { d } from '../src/cdc/relay.js';\nexport const b = d;\n",
  'bench/run.mjs': "import '../dist/index.js';\n",
};

describe('check-imports', () => {
  it('passes a tree whose imports all run down the layers, without a circle', () => {
    const r = check(tree(CLEAN));
    expect(r.out).toContain('11 files: no import runs back up');
    expect(r.status).toBe(0);
  });

  it('fails on a circle, naming each file and each tie, in src/ or in bench/', () => {
    const r = check(
      tree({
        ...CLEAN,
        'src/metrics/labels.ts': "import type { S } from './sink.js';\nexport type L = S;\n",
        'src/metrics/sink.ts': "import type { L } from './labels.js';\nexport type S = L;\n",
        'bench/cpu.ts': "import { b } from './lib.js';\nexport const c = b;\n",
        'bench/lib.ts': "import type { T } from './systems/types.js';\nexport const b = 1 as T;\n",
        'bench/systems/types.ts': "export type T = typeof import('../cpu.js').c;\n",
      }),
    );
    expect(r.status).toBe(1);
    expect(r.out).toContain('circle of 2 files: src/metrics/labels.ts, src/metrics/sink.ts');
    expect(r.out).toContain('src/metrics/sink.ts -> src/metrics/labels.ts');
    // The tie back to cpu.ts is a type-position import(): it counts.
    expect(r.out).toContain('circle of 3 files: bench/cpu.ts, bench/lib.ts, bench/systems/types.ts');
    expect(r.out).toContain('bench/systems/types.ts -> bench/cpu.ts');
  });

  it('fails on an import that runs back up the layers, naming the edge, its line and the layers', () => {
    const r = check(
      tree({
        ...CLEAN,
        'src/envelope/read.ts':
          "import { E } from '../errors.js';\nimport type { M } from '../publishers/contract.js';\nexport type R = [E, M];\n",
        'src/ops/readiness.ts': "export async function f() {\n  return import('../relay/relay.js');\n}\n",
      }),
    );
    expect(r.status).toBe(1);
    expect(r.out).toContain('src/envelope/read.ts:2 -> src/publishers/contract.ts');
    expect(r.out).toContain('runs back up: layer 3 (src/schema/, src/envelope/) imports layer 4');
    expect(r.out).toContain('src/ops/readiness.ts:2 -> src/relay/relay.ts');
    expect(r.out).toContain('2 offence(s)');
  });

  it('keeps the polling source out of CDC and CDC out of the runtime', () => {
    const r = check(
      tree({
        ...CLEAN,
        'src/cdc/take.ts': "import { c } from '../relay/polling/claim.js';\nexport const t = c;\n",
        'src/relay/loop.ts': "import type { d } from '../cdc/relay.js';\nexport type L = typeof d;\n",
      }),
    );
    expect(r.status).toBe(1);
    expect(r.out).toContain('src/cdc/take.ts:1 -> src/relay/polling/claim.ts');
    expect(r.out).toContain('src/cdc/ never imports the polling source');
    expect(r.out).toContain('src/relay/loop.ts:1 -> src/cdc/relay.ts');
    expect(r.out).toContain('src/relay/ never imports src/cdc/');
  });

  it('fails on an import that names no file, and on a file of src/ in no layer', () => {
    const r = check(
      tree({
        ...CLEAN,
        'src/producer/enqueue.ts': "export { x } from './wal-message.js';\n",
        'src/extras/thing.ts': 'export const t = 1;\n',
      }),
    );
    expect(r.status).toBe(1);
    expect(r.out).toContain("import './wal-message.js' (line 1) names no file");
    expect(r.out).toContain('src/extras/thing.ts');
    expect(r.out).toContain('in no layer');
  });

  it('warns of an allowlisted offence, and fails once the allowlisted offence is gone', () => {
    const circle = {
      'src/cdc/handover.ts': "import { w } from './handover-data-errors.js';\nexport const h = w;\n",
      'src/cdc/handover-data-errors.ts': "import type { h } from './handover.js';\nexport const w = 1;\n",
    };
    const known = join(tree({}), 'known.json');
    writeFileSync(
      known,
      JSON.stringify([
        { circle: ['src/cdc/handover-data-errors.ts', 'src/cdc/handover.ts'], until: 'issue 25' },
      ]),
    );
    const allowed = check(tree({ ...CLEAN, ...circle }), '--known', known);
    expect(allowed.status).toBe(0);
    expect(allowed.out).toContain('1 allowlisted (KNOWN) offence(s), warning only');
    expect(allowed.out).toContain('allowed until issue 25');

    const gone = check(tree(CLEAN), '--known', known);
    expect(gone.status).toBe(1);
    expect(gone.out).toContain('allowlisted but gone');
  });
});
