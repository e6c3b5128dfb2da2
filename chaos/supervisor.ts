/**
 * The process manager of a chaos run: spawns each component (a Node process running the built
 * library), restarts it after a short random delay when it dies — killed on purpose or not —
 * and records every exit nobody asked for (a component must never exit on a transient fault).
 * Components print one JSON stats line per second on stdout; logs go to a file per component.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export type Role = 'producer' | 'relay' | 'consumer';

export interface ComponentSpec {
  readonly name: string;
  readonly role: Role;
  /** The script in chaos/processes/. */
  readonly script: string;
  /** Passed as TXO_CHAOS (JSON). */
  readonly config: Readonly<Record<string, unknown>>;
}

export interface UnexpectedExit {
  readonly name: string;
  readonly at: number;
  readonly code: number | null;
  readonly signal: string | null;
  /** The last lines it logged. */
  readonly tail: readonly string[];
}

export type Stats = Readonly<Record<string, number>>;

const TAIL_LINES = 15;

export class Component {
  private child: ChildProcess | undefined;
  private expectExit = false;
  private retired = false;
  /** Killed and kept down until `release()` (a standby must take over meanwhile). */
  private held = false;
  private restartTimer: NodeJS.Timeout | undefined;
  private readonly log: WriteStream;
  private readonly tail: string[] = [];
  private readonly standing = new Map<string, string>();
  /** The last stats line of each incarnation. */
  private readonly incarnations: Stats[] = [];
  starts = 0;

  constructor(
    readonly spec: ComponentSpec,
    logDir: string,
    private readonly onUnexpectedExit: (exit: UnexpectedExit) => void,
  ) {
    this.log = createWriteStream(join(logDir, `${spec.name}.log`), { flags: 'a' });
  }

  get name(): string {
    return this.spec.name;
  }

  get running(): boolean {
    return this.child !== undefined;
  }

  start(): void {
    if (this.retired || this.child) return;
    this.starts++;
    const child = spawn(process.execPath, [join(import.meta.dirname, 'processes', this.spec.script)], {
      env: { ...process.env, TXO_CHAOS: JSON.stringify({ ...this.spec.config, name: this.spec.name }) },
      // stdin is a pipe the component watches: when the harness dies, the component ends too.
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.child = child;
    this.expectExit = false;
    // A line for a running incarnation's stdin (pause/resume): said again to each new one. A
    // write to one that just died fails (EPIPE): nothing to tell it any more.
    child.stdin?.on('error', () => undefined);
    for (const line of this.standing.values()) child.stdin?.write(`${line}\n`);
    const index = this.incarnations.push({}) - 1;
    this.log.write(`--- start #${this.starts} pid ${child.pid} at ${new Date().toISOString()}\n`);
    createInterface({ input: child.stdout! }).on('line', (line) => {
      if (line.startsWith('{"stats":')) {
        try {
          this.incarnations[index] = (JSON.parse(line) as { stats: Stats }).stats;
          return;
        } catch {
          // not a stats line after all: logged below
        }
      }
      this.note(line);
    });
    createInterface({ input: child.stderr! }).on('line', (line) => this.note(line));
    child.on('exit', (code, signal) => {
      this.child = undefined;
      this.log.write(`--- exit code ${code} signal ${signal} at ${new Date().toISOString()}\n`);
      if (!this.expectExit && !this.retired) {
        this.onUnexpectedExit({ name: this.name, at: Date.now(), code, signal, tail: [...this.tail] });
      }
      if (!this.retired && !this.held) {
        // As a process manager would: back after a short random delay.
        this.restartTimer = setTimeout(() => this.start(), 300 + Math.random() * 1700);
      }
    });
  }

  private note(line: string): void {
    this.log.write(`${line}\n`);
    this.tail.push(line);
    if (this.tail.length > TAIL_LINES) this.tail.shift();
  }

  /** kill -9 (restarted by the supervisor). */
  kill(): boolean {
    if (!this.child) return false;
    this.expectExit = true;
    this.child.kill('SIGKILL');
    return true;
  }

  /** kill -9, and no restart until `release()`. */
  killAndHold(): boolean {
    this.held = true;
    return this.kill();
  }

  /** Starts a held component again. */
  release(): void {
    if (!this.held) return;
    this.held = false;
    if (!this.child) this.start();
  }

  /**
   * A line on the component's stdin, kept as the standing order of its `key` (a later line of
   * the same key replaces it): every later incarnation is told it at start too.
   */
  tell(key: string, line: string): void {
    this.standing.set(key, line);
    this.child?.stdin?.write(`${line}\n`);
  }

  /** The last stats line of the incarnation running now (undefined when down or silent yet). */
  latest(): Stats | undefined {
    if (!this.child) return undefined;
    const last = this.incarnations[this.incarnations.length - 1];
    return last && Object.keys(last).length > 0 ? last : undefined;
  }

  /** SIGSTOP for `ms`, then SIGCONT (to that same process, if it still lives). */
  freeze(ms: number): boolean {
    const child = this.child;
    if (!child) return false;
    child.kill('SIGSTOP');
    setTimeout(() => child.kill('SIGCONT'), ms).unref();
    return true;
  }

  /** Wakes a frozen process at once. */
  thaw(): void {
    this.child?.kill('SIGCONT');
  }

  /** No more restarts; SIGTERM (graceful stop), SIGKILL after `timeoutMs`. */
  async retire(timeoutMs: number): Promise<void> {
    this.retired = true;
    clearTimeout(this.restartTimer);
    const child = this.child;
    if (!child) return;
    this.expectExit = true;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGCONT');
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    await exited;
    clearTimeout(timer);
  }

  /** Every incarnation's last stats, summed (an incarnation killed -9 lost up to its last second). */
  stats(): Record<string, number> {
    const sum: Record<string, number> = {};
    for (const s of this.incarnations)
      for (const [k, v] of Object.entries(s)) if (typeof v === 'number') sum[k] = (sum[k] ?? 0) + v;
    return sum;
  }

  async close(): Promise<void> {
    await this.retire(2_000);
    await new Promise<void>((resolve) => this.log.end(() => resolve()));
  }
}

export class Supervisor {
  readonly components: Component[] = [];
  readonly unexpectedExits: UnexpectedExit[] = [];

  constructor(private readonly logDir: string) {}

  add(spec: ComponentSpec): Component {
    const component = new Component(spec, this.logDir, (exit) => {
      this.unexpectedExits.push(exit);
      console.log(`  ! ${exit.name} exited by itself (code ${exit.code}, signal ${exit.signal})`);
    });
    this.components.push(component);
    return component;
  }

  get(name: string): Component {
    const c = this.components.find((x) => x.name === name);
    if (!c) throw new Error(`no component ${name}`);
    return c;
  }

  byRole(role: Role): Component[] {
    return this.components.filter((c) => c.spec.role === role);
  }

  startAll(): void {
    for (const c of this.components) c.start();
  }

  thawAll(): void {
    for (const c of this.components) c.thaw();
  }

  async retire(role: Role, timeoutMs: number): Promise<void> {
    await Promise.all(this.byRole(role).map((c) => c.retire(timeoutMs)));
  }

  async closeAll(): Promise<void> {
    await Promise.all(this.components.map((c) => c.close()));
  }
}
