/**
 * A private PostgreSQL cluster for the chaos run: initdb on a free port in a temp dir, run as
 * the `postgres` OS user (we are root), restarted fast or immediate on purpose, removed at the end.
 */
import { execFile, execFileSync } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../test/helpers/processes.js';

const run = promisify(execFile);
const BIN = process.env['TXO_PG_BIN'] ?? '/usr/lib/postgresql/15/bin';

/** Runs a PostgreSQL binary as the postgres OS user when we are root. */
async function pgBinary(name: string, args: readonly string[], timeoutMs = 120_000): Promise<string> {
  const [file, argv] =
    process.getuid?.() === 0
      ? ['/usr/sbin/runuser', ['-u', 'postgres', '--', join(BIN, name), ...args]]
      : [join(BIN, name), [...args]];
  const { stdout } = await run(file, argv, { timeout: timeoutMs });
  return stdout;
}

export class PrivatePostgres {
  private running = false;

  private constructor(
    readonly dir: string,
    readonly port: number,
  ) {}

  static async start(): Promise<PrivatePostgres> {
    const dir = mkdtempSync(join(tmpdir(), 'txo-chaos-pg-'));
    const pg = new PrivatePostgres(dir, await freePort());
    try {
      if (process.getuid?.() === 0) chownSync(dir, osId('-u', 'postgres'), osId('-g', 'postgres'));
      await pgBinary('initdb', ['-D', pg.data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
      await pg.ctl(['start', '-w', '-t', '60', '-l', join(dir, 'postgres.log'), '-o', pg.serverOptions()]);
      pg.running = true;
      return pg;
    } catch (error) {
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
  }

  get data(): string {
    return join(this.dir, 'data');
  }

  get logFile(): string {
    return join(this.dir, 'postgres.log');
  }

  /** Direct URL (the harness's own checks); components connect through a proxy instead. */
  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  private serverOptions(): string {
    // fsync off: the faults are process crashes, never an OS crash, so the page cache keeps
    // everything an immediate shutdown leaves behind; it spares the shared disk.
    return [
      `-p ${this.port}`,
      '-c listen_addresses=127.0.0.1',
      `-c unix_socket_directories=${this.dir}`,
      '-c max_connections=200',
      '-c fsync=off',
      '-c shared_buffers=128MB',
    ].join(' ');
  }

  private ctl(args: readonly string[]): Promise<string> {
    return pgBinary('pg_ctl', ['-D', this.data, ...args]);
  }

  /** `pg_ctl restart -m fast|immediate`, waiting until it accepts connections again. */
  async restart(mode: 'fast' | 'immediate'): Promise<void> {
    await this.ctl([
      'restart',
      '-m',
      mode,
      '-w',
      '-t',
      '120',
      '-l',
      this.logFile,
      '-o',
      this.serverOptions(),
    ]);
  }

  async destroy(): Promise<void> {
    if (this.running) {
      this.running = false;
      await this.ctl(['stop', '-m', 'immediate', '-w', '-t', '30']).catch(() => undefined);
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The numeric id of an OS user (`-u`) or its group (`-g`). */
function osId(flag: '-u' | '-g', name: string): number {
  return Number(execFileSync('id', [flag, name], { encoding: 'utf8' }).trim());
}
