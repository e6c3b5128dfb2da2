import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

async function portOpen(port: number): Promise<boolean> {
  const { connect } = await import('node:net');
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

export async function waitForPort(port: number, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await portOpen(port)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`port ${port} did not open within ${timeoutMs} ms`);
}

export function exited(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

/**
 * A private nats-server with JetStream, on its own port and store, that a test
 * may stop and start again (the shared server on 4222 is never touched).
 */
export class PrivateNats {
  readonly storeDir = mkdtempSync(join(tmpdir(), 'txo-nats-'));
  private child: ChildProcess | undefined;

  private constructor(
    readonly port: number,
    private readonly jetstream: boolean,
  ) {}

  /** `jetstream: false` starts a server with JetStream disabled (core NATS only). */
  static async start(options: { jetstream?: boolean } = {}): Promise<PrivateNats> {
    const nats = new PrivateNats(await freePort(), options.jetstream ?? true);
    await nats.up();
    return nats;
  }

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  async up(): Promise<void> {
    const bin = process.env['NATS_SERVER_BIN'] ?? '/usr/sbin/nats-server';
    const js = this.jetstream ? ['-js', '-sd', this.storeDir] : [];
    this.child = spawn(bin, ['-a', '127.0.0.1', '-p', String(this.port), ...js], {
      stdio: 'ignore',
    });
    await waitForPort(this.port);
  }

  async down(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (!child) return;
    child.kill('SIGKILL');
    await exited(child);
  }

  async destroy(): Promise<void> {
    await this.down();
    rmSync(this.storeDir, { recursive: true, force: true });
  }
}

/**
 * Runs a fixture script (Node) with `config` as JSON in TXO_FIXTURE; `lines()` are the JSON lines
 * it printed on stdout so far.
 */
export function startFixture(
  script: string,
  config: Record<string, unknown>,
): { child: ChildProcess; lines: () => Array<Record<string, unknown>> } {
  const child = spawn(process.execPath, [script], {
    env: { ...process.env, TXO_FIXTURE: JSON.stringify(config) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout!.on('data', (c: Buffer) => {
    out += c.toString();
  });
  const lines = () =>
    out
      .split('\n')
      .slice(0, -1) // the last one is incomplete (or empty)
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  return { child, lines };
}

/** What a child process printed and how it ended. */
export interface ProcessRun {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** A spawned child's output as it comes (`stderr()` so far) and `done` when it has closed. */
export interface CollectedProcess {
  readonly child: ChildProcess;
  readonly done: Promise<ProcessRun>;
  stdout(): string;
  stderr(): string;
}

/** Collects what a child spawned with piped stdout and stderr prints; `done` rejects if it cannot start. */
export function collectOutput(child: ChildProcess): CollectedProcess {
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const done = new Promise<ProcessRun>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
  return { child, done, stdout: () => stdout, stderr: () => stderr };
}
