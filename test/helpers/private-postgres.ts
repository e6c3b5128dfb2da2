/**
 * A private PostgreSQL cluster for the tests that stop, crash or restart the server (the shared
 * one on 5432 is never touched): initdb on a free port in a temp dir, run as the `postgres` OS
 * user when we are root, removed by `destroy()`. By default set up for logical replication (the CDC
 * tests: `wal_level=logical`, replication slots, a short `wal_sender_timeout`); the chaos run
 * (chaos/postgres.ts) starts it with settings of its own.
 */
import { execFile, execFileSync } from 'node:child_process';
import { chownSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './processes.js';

const run = promisify(execFile);
const BIN = process.env['TXO_PG_BIN'] ?? '/usr/lib/postgresql/15/bin';

/** The settings every private cluster gets; `start({ settings })` adds to or overrides them. */
export const PRIVATE_POSTGRES_SETTINGS: Readonly<Record<string, string>> = {
  listen_addresses: '127.0.0.1',
  max_connections: '100',
  // Process crashes only, never an OS crash: the page cache keeps what an immediate stop leaves
  // (synchronous_commit stays on: an acknowledged commit is in the WAL when the server dies).
  fsync: 'off',
  full_page_writes: 'off',
  shared_buffers: '64MB',
  wal_level: 'logical',
  max_wal_senders: '16',
  max_replication_slots: '16',
  // A dead replication client is noticed within seconds, not the default minute.
  wal_sender_timeout: '5s',
  max_slot_wal_keep_size: '1GB',
};

export type StopMode = 'smart' | 'fast' | 'immediate';

/** Runs a PostgreSQL binary as the postgres OS user when we are root. */
async function pgBinary(name: string, args: readonly string[], timeoutMs = 120_000): Promise<string> {
  const [file, argv] =
    process.getuid?.() === 0
      ? ['/usr/sbin/runuser', ['-u', 'postgres', '--', join(BIN, name), ...args]]
      : [join(BIN, name), [...args]];
  const { stdout } = await run(file, argv, { timeout: timeoutMs });
  return stdout;
}

/** The numeric id of an OS user (`-u`) or its group (`-g`). */
function osId(flag: '-u' | '-g', name: string): number {
  return Number(execFileSync('id', [flag, name], { encoding: 'utf8' }).trim());
}

export class PrivatePostgres {
  private running = false;

  private constructor(
    readonly dir: string,
    readonly port: number,
    private readonly settings: Readonly<Record<string, string>>,
  ) {}

  /**
   * initdb (trust auth, user postgres) and start; `settings` are `-c name=value` server options,
   * over `base` (default {@link PRIVATE_POSTGRES_SETTINGS}; the chaos run has its own).
   */
  static async start(
    options: { settings?: Record<string, string>; base?: Readonly<Record<string, string>> } = {},
  ): Promise<PrivatePostgres> {
    const dir = mkdtempSync(join(tmpdir(), 'txo-private-pg-'));
    const pg = new PrivatePostgres(dir, await freePort(), {
      ...(options.base ?? PRIVATE_POSTGRES_SETTINGS),
      ...options.settings,
    });
    try {
      if (process.getuid?.() === 0) chownSync(dir, osId('-u', 'postgres'), osId('-g', 'postgres'));
      await pgBinary('initdb', ['-D', pg.data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
      await pg.up();
      return pg;
    } catch (error) {
      await pg.destroy();
      throw error;
    }
  }

  get data(): string {
    return join(this.dir, 'data');
  }

  get logFile(): string {
    return join(this.dir, 'postgres.log');
  }

  get isRunning(): boolean {
    return this.running;
  }

  /** The `postgres` database; `url('other')` another one. */
  url(database = 'postgres'): string {
    return `postgres://postgres@127.0.0.1:${this.port}/${database}`;
  }

  /** The server log so far (for a failing test's evidence). */
  log(): string {
    try {
      return readFileSync(this.logFile, 'utf8');
    } catch {
      return '';
    }
  }

  private serverOptions(): string {
    return [
      `-p ${this.port}`,
      `-c unix_socket_directories=${this.dir}`,
      ...Object.entries(this.settings).map(([name, value]) => `-c ${name}=${value}`),
    ].join(' ');
  }

  private ctl(args: readonly string[]): Promise<string> {
    return pgBinary('pg_ctl', ['-D', this.data, ...args]);
  }

  /** Starts the server (again), waiting until it accepts connections. */
  async up(): Promise<void> {
    await this.ctl(['start', '-w', '-t', '60', '-l', this.logFile, '-o', this.serverOptions()]);
    this.running = true;
  }

  /**
   * Stops the server: `fast` ends every session and checkpoints; `immediate` is a crash (no
   * checkpoint, recovery at the next start).
   */
  async stop(mode: StopMode = 'fast'): Promise<void> {
    await this.ctl(['stop', '-m', mode, '-w', '-t', '60']);
    this.running = false;
  }

  /**
   * `pg_ctl restart -m <mode>`, waiting until it accepts connections again; `waitSeconds` bounds
   * the stop and the start each (pg_ctl's -t), and pg_ctl fails past it.
   */
  async restart(
    mode: StopMode = 'fast',
    { waitSeconds = 120 }: { waitSeconds?: number } = {},
  ): Promise<void> {
    await this.ctl([
      'restart',
      '-m',
      mode,
      '-w',
      '-t',
      String(waitSeconds),
      '-l',
      this.logFile,
      '-o',
      this.serverOptions(),
    ]);
    this.running = true;
  }

  /** Stops the server (immediate) and removes the cluster. */
  async destroy(): Promise<void> {
    if (this.running) await this.stop('immediate').catch(() => undefined);
    rmSync(this.dir, { recursive: true, force: true });
  }
}
