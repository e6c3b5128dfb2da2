/**
 * A CDC relay in a child process (test/failure/fixtures/cdc-relay-process.mjs, the BUILT package:
 * `npm run build` first), for the tests that kill -9 it, SIGSTOP it, or restart what it talks
 * to. The child prints its stats every `statsEveryMs`; this side keeps the lines and waits on them.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { exited } from './processes.js';

const FIXTURE = join(
  dirname(fileURLToPath(import.meta.url)),
  '..',
  'failure',
  'fixtures',
  'cdc-relay-process.mjs',
);

/** What the child turns into `createCdcRelay` options and a publisher. */
export interface CdcChildConfig {
  readonly databaseUrl: string;
  readonly schema: string;
  readonly relayId: string;
  readonly broker: 'nats' | 'kafka';
  readonly nats?: { readonly servers: string; readonly stream: string; readonly subjects: readonly string[] };
  readonly kafka?: { readonly brokers: readonly string[]; readonly partitions?: number };
  readonly slot?: string;
  readonly publication?: string;
  readonly leaseMs?: number;
  readonly pollIntervalMs?: number;
  readonly batchSize?: number;
  readonly maxAttempts?: number;
  readonly heartbeatMs?: number;
  readonly silenceTimeoutMs?: number;
  readonly statusIntervalMs?: number;
  readonly maxInFlight?: number;
  /** The replication connection's settings (a proxy in front of the server); default the pool's. */
  readonly connection?: { host: string; port: number; user: string; database: string };
  readonly poolMax?: number;
  readonly statsEveryMs?: number;
  readonly debug?: boolean;
}

/** `stats().cdc` as the child prints it (LSNs as `16/B374D848`; read them with `lsnValue`). */
export interface ChildCdcStats {
  readonly slot: string;
  readonly streaming: boolean;
  readonly confirmedLsn: string | undefined;
  readonly serverLsn: string | undefined;
  readonly lagBytes: number;
  readonly retainedBytes: number;
  readonly lagSeconds: number;
  readonly reconnects: number;
  readonly handovers: number;
  readonly polled: number;
}

/** `stats()` as the child prints it. */
export interface ChildStats {
  readonly published: number;
  readonly retried: number;
  readonly dead: number;
  readonly unavailable: number;
  readonly batches: number;
  readonly partitions: number[];
  readonly lastError?: string;
  readonly cdc: ChildCdcStats;
}

type Line = Record<string, unknown>;

export class CdcRelayProcess {
  private readonly out: Line[] = [];
  private raw = '';
  private stderrText = '';
  private exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;

  private constructor(
    readonly child: ChildProcess,
    readonly config: CdcChildConfig,
  ) {
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (chunk: string) => {
      this.raw += chunk;
      const lines = this.raw.split('\n');
      this.raw = lines.pop() ?? '';
      for (const l of lines) {
        if (!l.startsWith('{')) continue;
        try {
          this.out.push(JSON.parse(l) as Line);
        } catch {
          // a line cut by a kill -9
        }
      }
    });
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (chunk: string) => {
      this.stderrText += chunk;
    });
    child.once('exit', (code, signal) => {
      this.exit = { code, signal };
    });
  }

  static spawn(config: CdcChildConfig): CdcRelayProcess {
    const child = spawn(process.execPath, [FIXTURE], {
      env: { ...process.env, TXO_FIXTURE: JSON.stringify(config) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    return new CdcRelayProcess(child, config);
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  /** Whether it exited (and how); undefined while it runs. */
  get exited(): { code: number | null; signal: NodeJS.Signals | null } | undefined {
    return this.exit;
  }

  lines(): readonly Line[] {
    return this.out;
  }

  stderr(): string {
    return this.stderrText;
  }

  /** Log lines at warn or error, and stderr: the evidence for a failing test. */
  problems(limit = 30): string {
    const logged = this.out
      .filter((l) => l['level'] === 'warn' || l['level'] === 'error')
      .slice(-limit)
      .map((l) => JSON.stringify(l));
    return [...logged, this.stderrText.slice(-4000)].join('\n');
  }

  /** The latest stats line, if any. */
  stats(): ChildStats | undefined {
    for (let i = this.out.length - 1; i >= 0; i--) {
      const s = this.out[i]!['stats'] as ChildStats | undefined;
      if (s && typeof s === 'object' && 'cdc' in s) return s;
    }
    return undefined;
  }

  /** The stats line printed on SIGUSR2, just before the child stopped itself. */
  frozenStats(): ChildStats | undefined {
    const line = this.out.findLast((l) => l['frozen'] !== undefined);
    return line?.['frozen'] as ChildStats | undefined;
  }

  /** Whether a log line's msg or fields contain `text`. */
  logged(text: string): boolean {
    return this.loggedLines(text).length > 0;
  }

  /** The log lines whose msg or fields contain `text`. */
  loggedLines(text: string): readonly Line[] {
    return this.out.filter((l) => l['stats'] === undefined && JSON.stringify(l).includes(text));
  }

  /** Waits until the latest stats satisfy `check`; throws with the child's problems otherwise. */
  async waitForStats(
    check: (s: ChildStats) => boolean,
    { timeoutMs = 30_000, what = 'stats' } = {},
  ): Promise<ChildStats> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const s = this.stats();
      if (s && check(s)) return s;
      if (this.exit)
        throw new Error(
          `relay ${this.config.relayId} exited (${JSON.stringify(this.exit)}) waiting for ${what}\n${this.problems()}`,
        );
      if (Date.now() > deadline)
        throw new Error(
          `timed out after ${timeoutMs} ms waiting for ${what} of relay ${this.config.relayId}; last stats ${JSON.stringify(s)}\n${this.problems()}`,
        );
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  /** Waits until it streams (stats().cdc.streaming). */
  streaming(timeoutMs = 30_000): Promise<ChildStats> {
    return this.waitForStats((s) => s.cdc?.streaming === true, { timeoutMs, what: 'streaming' });
  }

  /** kill -9, waiting until it is gone. */
  async kill(): Promise<void> {
    if (this.exit) return;
    this.child.kill('SIGCONT');
    this.child.kill('SIGKILL');
    await exited(this.child);
  }

  /** SIGUSR2: the child prints its stats and SIGSTOPs itself; resolves once it printed them. */
  async freeze(timeoutMs = 5000): Promise<ChildStats> {
    const before = this.out.filter((l) => l['frozen'] !== undefined).length;
    this.child.kill('SIGUSR2');
    const deadline = Date.now() + timeoutMs;
    while (this.out.filter((l) => l['frozen'] !== undefined).length === before) {
      if (Date.now() > deadline) throw new Error(`relay ${this.config.relayId} did not freeze`);
      await new Promise((r) => setTimeout(r, 10));
    }
    return this.frozenStats()!;
  }

  /** SIGCONT after `freeze()`. */
  thaw(): void {
    this.child.kill('SIGCONT');
  }

  /** SIGTERM (graceful stop), SIGKILL after `timeoutMs`. */
  async stop(timeoutMs = 10_000): Promise<void> {
    if (this.exit) return;
    this.child.kill('SIGCONT');
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), timeoutMs);
    await exited(this.child);
    clearTimeout(timer);
  }
}
