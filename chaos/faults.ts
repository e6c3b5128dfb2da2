/** Applies one scheduled fault to the run's servers, proxies and components, and times it. */
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import type { TcpProxy } from '../dist/testing/tcp-proxy.js';
import type { ChaosBroker } from './brokers.js';
import { checkQuiet, type QuietCheck, streamingRelay } from './cdc.js';
import type { PrivatePostgres } from './postgres.js';
import type { Fault } from './schedule.js';
import type { Supervisor } from './supervisor.js';

export interface FaultRecord extends Fault {
  readonly startedMs: number;
  /** When the fault stopped acting (a kill: when it was sent; a restart: when the server was back). */
  readonly endedMs: number;
  /** false when its target was not running at that moment (between a kill and its restart). */
  readonly applied: boolean;
  readonly error?: string;
  /** takeover: ms from the streamer's kill until a standby streamed. */
  readonly takeoverMs?: number;
  /** quiet: what the slot did while producers were paused. */
  readonly quiet?: QuietCheck;
}

/** The CDC run's slot, read on the harness's own connection (quiet periods). */
export interface CdcTarget {
  readonly db: pg.Pool;
  readonly slot: string;
}

/** A takeover waits this long for a standby to stream (3 default lease periods), then gives up. */
export const TAKEOVER_BOUND_MS = 45_000;

/** Faults that do not hold the schedule up while they last (the next ones go on meanwhile). */
export function runsAlongside(fault: Fault): boolean {
  return fault.kind === 'takeover';
}

export class Injector {
  constructor(
    private readonly postgres: PrivatePostgres,
    private readonly broker: ChaosBroker,
    private readonly proxies: ReadonlyMap<string, TcpProxy>,
    private readonly supervisor: Supervisor,
    private readonly cdc?: CdcTarget,
    private readonly signal?: AbortSignal,
  ) {}

  async apply(fault: Fault): Promise<FaultRecord> {
    const startedMs = Date.now();
    const lasting = (fault.durationS ?? 0) * 1000;
    let target = fault.target;
    const done = (
      applied: boolean,
      endedMs = Date.now(),
      error?: string,
      extra: Pick<FaultRecord, 'takeoverMs' | 'quiet'> = {},
    ): FaultRecord => ({
      ...fault,
      target,
      startedMs,
      endedMs,
      applied,
      ...(error ? { error } : {}),
      ...extra,
    });
    try {
      switch (fault.kind) {
        case 'kill':
          return done(this.supervisor.get(fault.target).kill());
        case 'stop':
          return done(this.supervisor.get(fault.target).freeze(lasting), startedMs + lasting);
        case 'pg-restart-fast':
          await this.postgres.restart('fast');
          return done(true);
        case 'pg-restart-immediate':
          await this.postgres.restart('immediate');
          return done(true);
        case 'broker-restart':
          await this.broker.restart();
          return done(true);
        case 'tcp-reset':
          this.proxy(fault.target).reset();
          return done(true);
        case 'tcp-stall':
          // New connections wait unconnected until the stall ends (the link holds the handshake too).
          this.proxy(fault.target).stall({ forMs: lasting, newConnections: 'held' });
          return done(true, startedMs + lasting);
        case 'tcp-latency':
          this.proxy(fault.target).delay(fault.latencyMs ?? 100, lasting);
          return done(true, startedMs + lasting);
        case 'repl-reset':
        case 'repl-stall': {
          const streamer = streamingRelay(this.supervisor);
          if (!streamer) return done(false, Date.now(), 'no relay streaming');
          target = `${streamer}>repl`;
          if (fault.kind === 'repl-reset') {
            this.proxy(target).reset();
            return done(true);
          }
          // Half-open: the sockets stay open, nothing is forwarded (a reconnect is held too).
          this.proxy(target).stall({ forMs: lasting, newConnections: 'held' });
          return done(true, startedMs + lasting);
        }
        case 'takeover': {
          // It runs alongside the schedule: it may wait a while for a relay to stream.
          let streamer = streamingRelay(this.supervisor);
          while (!streamer && Date.now() - startedMs < TAKEOVER_BOUND_MS / 2) {
            await sleep(250, undefined, { signal: this.signal });
            streamer = streamingRelay(this.supervisor);
          }
          if (!streamer) return done(false, Date.now(), 'no relay streaming');
          target = streamer;
          const killed = this.supervisor.get(streamer);
          const killedAt = Date.now();
          if (!killed.killAndHold()) return done(false, Date.now(), 'not running');
          try {
            while (Date.now() - killedAt < TAKEOVER_BOUND_MS) {
              const now = streamingRelay(this.supervisor);
              if (now !== undefined && now !== streamer)
                return done(true, Date.now(), undefined, { takeoverMs: Date.now() - killedAt });
              await sleep(250, undefined, { signal: this.signal });
            }
            return done(
              true,
              Date.now(),
              `no standby streamed within ${TAKEOVER_BOUND_MS / 1000} s of the kill`,
            );
          } finally {
            killed.release();
          }
        }
        case 'quiet': {
          if (!this.cdc) return done(false, Date.now(), 'no slot to watch');
          for (const p of this.supervisor.byRole('producer')) p.tell('pace', 'pause');
          try {
            const quiet = await checkQuiet(
              this.cdc.db,
              this.cdc.slot,
              lasting,
              this.signal ?? new AbortController().signal,
            );
            return done(true, Date.now(), quiet.problem, { quiet });
          } finally {
            for (const p of this.supervisor.byRole('producer')) p.tell('pace', 'resume');
          }
        }
      }
    } catch (error) {
      return done(false, Date.now(), error instanceof Error ? error.message : String(error));
    }
  }

  private proxy(link: string): TcpProxy {
    const proxy = this.proxies.get(link);
    if (!proxy) throw new Error(`no proxy link ${link}`);
    return proxy;
  }

  /** Ends every stall, latency, SIGSTOP and hold at once (before the drain). */
  healAll(): void {
    for (const p of this.proxies.values()) p.heal();
    this.supervisor.thawAll();
    for (const c of this.supervisor.components) c.release();
  }
}
