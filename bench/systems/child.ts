/** A benchmark's relay or listener in a child process: it prints JSON lines to stdout. */
import { type ChildProcess, spawn } from 'node:child_process';
import { renameSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { buildSync } from 'esbuild';
import type { BenchContext } from './types.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const compiled = new Map<string, string>();

/**
 * `entry` (a path under the repository) and what it imports bundled into one plain JavaScript
 * file under .tmp/bench (packages left to node_modules), once per harness process: a measured
 * process then runs no TypeScript loader (tsx's loader thread and source maps cost CPU and
 * memory the program itself would not).
 */
export function compiledScript(entry: string): string {
  let target = compiled.get(entry);
  if (target !== undefined) return target;
  target = join(ROOT, '.tmp', 'bench', entry.replaceAll('/', '_').replace(/\.ts$/, '.mjs'));
  const partial = `${target}.${process.pid}`;
  buildSync({
    entryPoints: [join(ROOT, entry)],
    outfile: partial,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    packages: 'external',
    logLevel: 'error',
  });
  renameSync(partial, target);
  compiled.set(entry, target);
  return target;
}

export interface RelayChild {
  readonly child: ChildProcess;
  readonly lines: string[];
}

/**
 * Starts `args` under this Node.js (after TXO_RELAY_NODE_ARGS, e.g. --cpu-prof, unless `relay`
 * is false: a workload's own process) with `config` as JSON in the environment variable
 * `envName`, and collects the JSON lines it prints.
 */
export function spawnRelayChild(
  args: readonly string[],
  envName: string,
  config: unknown,
  relay = true,
): RelayChild {
  const nodeArgs = relay ? (process.env['TXO_RELAY_NODE_ARGS'] ?? '').split(' ').filter(Boolean) : [];
  const child = spawn(process.execPath, [...nodeArgs, ...args], {
    env: { ...process.env, [envName]: JSON.stringify(config) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  let partial = '';
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (chunk: string) => {
    // A chunk may end inside a line: its start waits for the rest.
    const parts = (partial + chunk).split('\n');
    partial = parts.pop()!;
    for (const line of parts) if (line) lines.push(line);
  });
  return { child, lines };
}

export async function whenStarted(r: RelayChild): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    if (r.lines.some((l) => l.includes('"started"'))) return;
    if (hasExited(r)) throw new Error('a relay process exited before it started');
    await new Promise((res) => setTimeout(res, 5));
  }
  throw new Error('a relay process did not start within 10 s');
}

/** Whether the process is gone (it exited, or a signal ended it). */
export function hasExited(r: RelayChild): boolean {
  return r.child.exitCode !== null || r.child.signalCode !== null;
}

/** Stops a relay process gracefully; its peak RSS in MB when it reported one. */
export async function stopRelay(r: RelayChild): Promise<number | undefined> {
  // A process that already exited (it failed to start) would never emit 'exit' again.
  if (!hasExited(r)) {
    const exited = new Promise((resolve) => r.child.once('exit', resolve));
    r.child.kill('SIGTERM');
    await exited;
  }
  for (const line of r.lines) {
    const parsed = JSON.parse(line) as { peakRssMb?: number };
    if (parsed.peakRssMb !== undefined) return parsed.peakRssMb;
  }
  return undefined;
}

/** Counts the messages the JetStream stream of `ctx` holds, on one connection (polled often). */
export interface StreamCounter {
  count(): Promise<number>;
  close(): Promise<void>;
}

export async function streamCounter(ctx: BenchContext): Promise<StreamCounter> {
  const nc = await connect({ servers: ctx.natsUrl });
  const jsm = await jetstreamManager(nc);
  return {
    count: async () => (await jsm.streams.info(ctx.stream)).state.messages,
    close: () => nc.close(),
  };
}

/** The `stats` a relay process printed when it stopped (bench/relay-process.mjs), if any. */
export function finalStats(r: RelayChild): Record<string, unknown> | undefined {
  for (const line of r.lines) {
    const parsed = JSON.parse(line) as { stats?: Record<string, unknown> };
    if (parsed.stats !== undefined) return parsed.stats;
  }
  return undefined;
}
