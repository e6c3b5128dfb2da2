/**
 * CPU by process over a timed part of a benchmark, read from Linux /proc (the machine is shared,
 * so whole-machine figures would count other people's work): the relay's own process, the
 * PostgreSQL backends that serve it (its pool and, for a logical replication reader, its
 * walsender, which does the decoding) and the NATS server. PostgreSQL's background processes
 * (WAL writer, checkpointer, autovacuum) are left out: they serve everyone at once.
 *
 * Multi-threaded processes (node, nats-server) are read from /proc/<pid>/stat (utime + stime of
 * every thread, dead ones included; 10 ms ticks), single-threaded backends from
 * /proc/<pid>/schedstat (ns). A backend that connects during the timed part (a walsender, a pool
 * connection opened late) is counted whole (its backend_start is after the first sample); one
 * that exits is counted until it was last seen: sample often enough.
 */
import { readdirSync, readFileSync } from 'node:fs';
import type pg from 'pg';
import { NATS_URL } from './lib.js';
import type { CpuPer1000 } from './systems/types.js';

const TICK_US = 10_000; // CLK_TCK = 100 on Linux

/** utime + stime of a whole process, µs; undefined once it is gone (or on another OS). */
export function processCpuUs(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_US;
  } catch {
    return undefined;
  }
}

/** Time one single-threaded process spent on a CPU, µs (schedstat: ns resolution). */
function threadCpuUs(pid: number): number | undefined {
  try {
    return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1000;
  } catch {
    return undefined;
  }
}

let natsPid: number | null | undefined;

/** The nats-server process serving NATS_URL's port, when it runs on this machine. */
export function findNatsPid(): number | undefined {
  if (natsPid !== undefined) return natsPid ?? undefined;
  const port = new URL(NATS_URL.replace(/^nats:/, 'http:')).port || '4222';
  const found: Array<{ pid: number; cmd: string }> = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmd = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').join(' ');
      if (cmd.includes('nats-server')) found.push({ pid: Number(entry), cmd });
    } catch {
      // gone meanwhile
    }
  }
  const onPort = found.find((f) => new RegExp(`(-p|--port)[ =]${port}( |$)`).test(f.cmd));
  natsPid = (onPort ?? (found.length === 1 ? found[0] : undefined))?.pid ?? null;
  return natsPid ?? undefined;
}

export interface CpuMeterOptions {
  /** The relay/listener process(es). */
  readonly relayPids: readonly number[];
  /** `application_name` of every connection the relay opens (pool and replication). */
  readonly applicationName: string;
  /** A replication slot whose walsender (active_pid) belongs to the relay. */
  readonly slot?: string;
}

/** First and last reading of each process seen during the timed part. */
class Readings {
  readonly #first = new Map<number, number>();
  readonly #last = new Map<number, number>();

  /** `bornDuring`: the process started after the first sample, so all its CPU is the run's. */
  record(pid: number, us: number | undefined, bornDuring = false): void {
    if (us === undefined) return;
    if (!this.#first.has(pid)) this.#first.set(pid, bornDuring ? 0 : us);
    this.#last.set(pid, us);
  }

  get totalUs(): number {
    let sum = 0;
    for (const [pid, last] of this.#last) sum += last - this.#first.get(pid)!;
    return sum;
  }

  get size(): number {
    return this.#first.size;
  }
}

/**
 * Call `sample()` when the timed part starts, every few hundred ms during it, and when it
 * ends (before the relay stops), then `per1000(events)`.
 */
export class CpuMeter {
  readonly #pool: pg.Pool;
  readonly #options: CpuMeterOptions;
  readonly #relay = new Readings();
  readonly #postgres = new Readings();
  readonly #nats = new Readings();
  readonly #natsPid = findNatsPid();
  /** The database clock at the first sample (epoch ms). */
  #since: number | undefined;

  constructor(pool: pg.Pool, options: CpuMeterOptions) {
    this.#pool = pool;
    this.#options = options;
  }

  async sample(): Promise<void> {
    const { rows } = await this.#pool.query<{ pid: number; started: number }>(
      `SELECT pid, extract(epoch FROM backend_start) * 1000 AS started
       FROM pg_stat_activity
       WHERE application_name = $1
          OR pid = (SELECT active_pid FROM pg_replication_slots WHERE slot_name = $2)`,
      [this.#options.applicationName, this.#options.slot ?? ''],
    );
    const since = this.#since;
    for (const { pid, started } of rows) {
      this.#postgres.record(pid, threadCpuUs(pid), since !== undefined && Number(started) > since);
    }
    if (since === undefined) {
      const { rows: clock } = await this.#pool.query<{ now: number }>(
        'SELECT extract(epoch FROM clock_timestamp()) * 1000 AS now',
      );
      this.#since = Number(clock[0]!.now);
    }
    for (const pid of this.#options.relayPids) this.#relay.record(pid, processCpuUs(pid));
    if (this.#natsPid !== undefined) this.#nats.record(this.#natsPid, processCpuUs(this.#natsPid));
  }

  per1000(events: number): CpuPer1000 {
    const ms = (r: Readings): number | undefined => (r.size === 0 ? undefined : r.totalUs / events);
    const relay = ms(this.#relay);
    const postgres = ms(this.#postgres);
    const nats = ms(this.#nats);
    return {
      ...(relay === undefined ? {} : { relay }),
      ...(postgres === undefined ? {} : { postgres }),
      ...(nats === undefined ? {} : { nats }),
    };
  }
}
