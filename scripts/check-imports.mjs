#!/usr/bin/env node
// The import graph's two rules, checked over the files themselves (issue 25):
//   (a) no file-level import circle in src/, bench/ or chaos/;
//   (b) no import in src/ runs back up the layers (LAYERS below, lowest first).
// Every relative import counts: `import`, `import type`, `export ... from`, `import('...')`
// (also in type position) and `import x = require('...')`. An import that names no file
// fails the check too, so a form this script does not understand cannot hide an edge.
//
// Usage: node scripts/check-imports.mjs [--root DIR]   (DIR defaults to the repository)
// Exit 0: clean (allowlisted edges are printed as warnings); exit 1: each offence printed.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/** Folders whose files are read; a circle anywhere among them fails. */
const TREES = ['src', 'bench', 'chaos'];
const SKIP_DIRS = new Set(['node_modules', 'dist', 'results']);
const SOURCE_EXT = /\.(ts|mts|cts|js|mjs|cjs)$/;

/**
 * The layers of src/, lowest first: a file may import its own layer or a lower one. Each names
 * folders of src/ (ending in `/`: the longest that holds a file wins, so src/relay/polling/ is
 * not src/relay/), single files, or `*.ts`: the files right in src/.
 */
const LAYERS = [
  [1, ['*.ts', 'options/']], // errors, logger, redact, sleep …; option checks
  [2, ['core/']], // the neutral core: OutboxMessage, relay health (Fence, row → message)
  [3, ['schema/', 'envelope/']],
  // Producer and publishers sit below metrics and tracing: a publish's metrics and spans are
  // read from the publisher contract (PublishOutcome) and its destinations, while the producer
  // and the publishers record nothing themselves (issue 25 had them the other way round).
  [4, ['producer/', 'publishers/']],
  [5, ['metrics/', 'tracing/']],
  [6, ['adapters/', 'inbox/']],
  [7, ['consumers/', 'ops/']],
  [8, ['relay/']], // the runtime, which knows no source
  [9, ['relay/claim/']], // the claim from the events table: the polling and hand-over sources' reader
  [10, ['relay/polling/']], // the polling source
  [11, ['cdc/']], // the CDC sources (stream, hand-over)
  [12, ['testing/']],
  [13, ['cli/', 'index.ts']],
].map(([n, places]) => ({
  n,
  name: places.map((p) => (p === '*.ts' ? 'src/*.ts' : `src/${p}`)).join(', '),
  places,
}));

/** Edges forbidden whatever the layers say (paths relative to src/). */
const FORBIDDEN = [
  {
    rule: 'src/cdc/ never imports the polling source (src/relay/polling/)',
    test: (from, to) => from.startsWith('cdc/') && to.startsWith('relay/polling/'),
  },
  {
    rule: 'src/relay/ never imports src/cdc/',
    test: (from, to) => from.startsWith('relay/') && to.startsWith('cdc/'),
  },
];

/**
 * Known offences, each waiting on the work that removes it. They are printed as warnings and do
 * not fail the check; an entry that no longer matches an offence fails it, so the list can only
 * shrink. `from`/`to` are paths from the root; a circle entry names every file of the circle.
 * Empty this list as the work it waits on lands. Used for the repository only: `--root` runs
 * (the check's own tests) take theirs from `--known FILE.json`.
 */
const KNOWN = [];

// ---------------------------------------------------------------------------------------------

function parseArgs(argv) {
  const here = dirname(fileURLToPath(import.meta.url));
  let root = resolve(here, '..');
  let known = KNOWN;
  let rooted = false;
  for (let i = 0; i < argv.length; i++) {
    const value = argv[i + 1];
    if (argv[i] === '--root' && value !== undefined) {
      root = resolve(value);
      rooted = true;
      i++;
    } else if (argv[i] === '--known' && value !== undefined) {
      known = JSON.parse(readFileSync(value, 'utf8'));
      i++;
    } else {
      throw new Error(`check-imports: unknown argument ${argv[i]}`);
    }
  }
  if (rooted && !argv.includes('--known')) known = [];
  return { root, known };
}

function listFiles(dir) {
  if (!existsSync(dir)) return [];
  const out = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) {
      if (!SKIP_DIRS.has(entry.name)) out.push(...listFiles(join(dir, entry.name)));
    } else if (SOURCE_EXT.test(entry.name) && !entry.name.endsWith('.d.ts')) {
      out.push(join(dir, entry.name));
    }
  }
  return out;
}

/** Every module specifier a file names, with its line. */
function specifiers(file) {
  const text = readFileSync(file, 'utf8');
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const found = [];
  const add = (node) => {
    if (node && ts.isStringLiteralLike(node)) {
      found.push({ spec: node.text, line: source.getLineAndCharacterOfPosition(node.getStart()).line + 1 });
    }
  };
  const visit = (node) => {
    if (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) add(node.moduleSpecifier);
    else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) {
      add(node.moduleReference.expression);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      add(node.arguments[0]);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      add(node.argument.literal);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

const EXT_SWAP = { '.js': ['.ts', '.js'], '.mjs': ['.mts', '.mjs'], '.cjs': ['.cts', '.cjs'] };

/** The file a relative specifier names, or undefined. */
function resolveSpecifier(from, spec) {
  const base = resolve(dirname(from), spec);
  const ext = Object.keys(EXT_SWAP).find((e) => base.endsWith(e));
  const candidates = ext
    ? EXT_SWAP[ext].map((e) => base.slice(0, -ext.length) + e)
    : [
        base,
        `${base}.ts`,
        `${base}.mts`,
        `${base}.js`,
        `${base}.mjs`,
        join(base, 'index.ts'),
        join(base, 'index.js'),
      ];
  return candidates.find((c) => existsSync(c) && statSync(c).isFile());
}

/** Tarjan's strongly connected components; returns those with more than one file or a self-loop. */
function circles(nodes, edges) {
  let index = 0;
  const idx = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const out = [];
  const strong = (v) => {
    // Iterative, so a deep chain cannot overflow the stack.
    const work = [{ v, i: 0 }];
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    onStack.add(v);
    while (work.length > 0) {
      const frame = work[work.length - 1];
      const next = [...(edges.get(frame.v) ?? [])];
      if (frame.i < next.length) {
        const w = next[frame.i++];
        if (!idx.has(w)) {
          idx.set(w, index);
          low.set(w, index++);
          stack.push(w);
          onStack.add(w);
          work.push({ v: w, i: 0 });
        } else if (onStack.has(w)) {
          low.set(frame.v, Math.min(low.get(frame.v), idx.get(w)));
        }
        continue;
      }
      work.pop();
      if (work.length > 0) {
        const parent = work[work.length - 1].v;
        low.set(parent, Math.min(low.get(parent), low.get(frame.v)));
      }
      if (low.get(frame.v) === idx.get(frame.v)) {
        const component = [];
        let w;
        do {
          w = stack.pop();
          onStack.delete(w);
          component.push(w);
        } while (w !== frame.v);
        if (component.length > 1 || edges.get(frame.v)?.has(frame.v)) out.push(component.sort());
      }
    }
  };
  for (const v of nodes) if (!idx.has(v)) strong(v);
  return out;
}

/** The layer of a path relative to src/: its own name, else its deepest listed folder, else `*.ts`. */
function layerOf(path) {
  let best;
  let depth = -1;
  for (const layer of LAYERS) {
    for (const place of layer.places) {
      if (place === path) return layer;
      const d = place.length;
      if (place.endsWith('/') && path.startsWith(place) && d > depth) [best, depth] = [layer, d];
      if (place === '*.ts' && !path.includes('/') && depth < 0) best = layer;
    }
  }
  return best;
}

export function check(root) {
  const rel = (abs) => relative(root, abs).split(sep).join('/');
  const files = TREES.flatMap((t) => listFiles(join(root, t)));
  const nodes = files.map(rel);
  const edges = new Map(nodes.map((n) => [n, new Set()]));
  const lines = new Map(); // "from -> to" -> first line
  const offences = []; // { edge, rule }

  for (const file of files) {
    const from = rel(file);
    for (const { spec, line } of specifiers(file)) {
      if (!spec.startsWith('.')) continue;
      const target = resolveSpecifier(file, spec);
      if (target === undefined) {
        // Outside the trees read (bench/ and chaos/ import the build in dist/): not in the graph.
        const named = rel(resolve(dirname(file), spec));
        if (from.startsWith('src/') || TREES.some((t) => named.startsWith(`${t}/`))) {
          offences.push({ from, to: spec, rule: `import '${spec}' (line ${line}) names no file` });
        }
        continue;
      }
      const to = rel(target);
      edges.get(from)?.add(to);
      if (!lines.has(`${from} -> ${to}`)) lines.set(`${from} -> ${to}`, line);
    }
  }

  for (const [from, targets] of edges) {
    if (!from.startsWith('src/')) continue;
    const f = from.slice(4);
    const lf = layerOf(f);
    for (const to of targets) {
      if (!to.startsWith('src/')) {
        offences.push({ from, to, rule: 'src/ imports only files in src/' });
        continue;
      }
      const t = to.slice(4);
      const lt = layerOf(t);
      if (lf && lt && lt.n > lf.n) {
        offences.push({
          from,
          to,
          rule: `runs back up: layer ${lf.n} (${lf.name}) imports layer ${lt.n} (${lt.name})`,
        });
      }
      for (const rule of FORBIDDEN) if (rule.test(f, t)) offences.push({ from, to, rule: rule.rule });
    }
  }
  for (const from of nodes) {
    if (from.startsWith('src/') && !layerOf(from.slice(4))) {
      offences.push({ from, to: '', rule: 'file is in no layer: add its folder to LAYERS' });
    }
  }

  const cycles = circles(nodes, edges).map((files) => {
    const inside = new Set(files);
    const ties = files.flatMap((f) =>
      [...edges.get(f)].filter((t) => inside.has(t)).map((t) => `${f} -> ${t}`),
    );
    return { files, ties };
  });
  return { files: nodes.length, offences, cycles, lines };
}

function sameSet(a, b) {
  return a.length === b.length && [...a].sort().every((x, i) => x === [...b].sort()[i]);
}

function main() {
  const { root, known: allowed } = parseArgs(process.argv.slice(2));
  const { files, offences, cycles, lines } = check(root);
  const used = new Set();
  const known = (match) => {
    const i = allowed.findIndex(match);
    if (i >= 0) used.add(i);
    return i >= 0 ? allowed[i] : undefined;
  };
  const errors = [];
  const warnings = [];
  const at = (from, to) => (lines.has(`${from} -> ${to}`) ? `:${lines.get(`${from} -> ${to}`)}` : '');

  for (const o of offences) {
    const k = known((e) => e.from === o.from && e.to === o.to);
    const text = `  ${o.from}${at(o.from, o.to)} -> ${o.to}\n      ${o.rule}`;
    if (k) warnings.push(`${text}\n      allowed until ${k.until}`);
    else errors.push(text);
  }
  for (const c of cycles) {
    const k = known((e) => e.circle && sameSet(e.circle, c.files));
    const text = `  circle of ${c.files.length} files: ${c.files.join(', ')}\n${c.ties.map((t) => `      ${t}`).join('\n')}`;
    if (k) warnings.push(`${text}\n      allowed until ${k.until}`);
    else errors.push(text);
  }
  allowed.forEach((k, i) => {
    if (!used.has(i)) {
      const what = k.circle ? `circle ${k.circle.join(', ')}` : `${k.from} -> ${k.to}`;
      errors.push(`  allowlisted but gone (remove it from KNOWN): ${what}`);
    }
  });

  if (warnings.length > 0) {
    console.warn(
      `check-imports: ${warnings.length} allowlisted (KNOWN) offence(s), warning only:\n${warnings.join('\n')}`,
    );
  }
  if (errors.length > 0) {
    console.error(`check-imports: ${errors.length} offence(s) in ${files} files:\n${errors.join('\n')}`);
    process.exit(1);
  }
  const but = warnings.length > 0 ? ` except the ${warnings.length} allowlisted above` : '';
  console.log(`check-imports: ${files} files: no import runs back up the layers of src/, no circle${but}.`);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
