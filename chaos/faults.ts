/** Applies one scheduled fault to the run's servers, proxies and components, and times it. */
import type { TcpProxy } from '../dist/testing/tcp-proxy.js';
import type { ChaosBroker } from './brokers.js';
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
}

export class Injector {
  constructor(
    private readonly postgres: PrivatePostgres,
    private readonly broker: ChaosBroker,
    private readonly proxies: ReadonlyMap<string, TcpProxy>,
    private readonly supervisor: Supervisor,
  ) {}

  async apply(fault: Fault): Promise<FaultRecord> {
    const startedMs = Date.now();
    const lasting = (fault.durationS ?? 0) * 1000;
    const done = (applied: boolean, endedMs = Date.now(), error?: string): FaultRecord => ({
      ...fault,
      startedMs,
      endedMs,
      applied,
      ...(error ? { error } : {}),
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

  /** Ends every stall, latency and SIGSTOP at once (before the drain). */
  healAll(): void {
    for (const p of this.proxies.values()) p.heal();
    this.supervisor.thawAll();
  }
}
