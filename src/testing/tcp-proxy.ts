import { createServer, type Server, type Socket } from 'node:net';
import { type Address, type Direction, type HangUp, Link, LinkFaults } from './tcp-proxy-link.js';

export type { Address, Direction, HangUp } from './tcp-proxy-link.js';

export interface TcpProxyOptions {
  /** The port to listen on (default: a free one); the same again after `cut()` and `restore()`. */
  readonly port?: number;
  /**
   * How a connection is hung up when its other leg closed, and by `cut()`/`refuse()`/`close()`:
   * `'end'` (default) closes it (FIN), as the far side did; `'reset'` sends an RST, so a
   * server's clean close reaches the client as ECONNRESET.
   */
  readonly hangUp?: HangUp;
}

export interface StallOptions {
  /**
   * One direction only: `'upstream'` holds just what the client sends (the target's traffic
   * still reaches it: a one-way loss, or the moment a stall begins while answers are on their
   * way); `'downstream'` holds just what the target sends (requests arrive, their answers wait).
   */
  readonly only?: Direction;
  /**
   * `true`: the bytes read during the stall are discarded instead of held, as a network that
   * black-holes packets would (the sockets keep reading, so the sender's writes never back up;
   * nothing of it arrives after the stall). A hang-up still goes through, and a connection
   * `'held'` is read only when the stall ends. Default: `false` (held, delivered by `resume()`).
   */
  readonly drop?: boolean;
  /** Ends the stall by itself after this many ms (default: it lasts until `resume()`/`heal()`). */
  readonly forMs?: number;
  /**
   * A connection accepted during the stall: `'paused'` (default) is connected to the target
   * at once and stalled like the others; `'held'` is not connected to the target until the
   * stall ends (a link that holds the handshake too).
   */
  readonly newConnections?: 'paused' | 'held';
}

/**
 * A TCP proxy on 127.0.0.1 in front of a server, for failure tests. It breaks the way networks
 * and servers break:
 *
 * - `cut()` (or `refuse()`): drops every connection and refuses new ones, as a stopped server
 *   would; `restore()` (or `resume()`) accepts again on the same port;
 * - `reset()`: an RST on every open connection now; the listener stays;
 * - `stall()`: stops forwarding but keeps every socket open, like a network that silently
 *   holds packets (the client sees no error, its writes just get no answers); `resume()`
 *   forwards again, held bytes first and in order (TCP would retransmit them). See
 *   {@link StallOptions} for one-way, dropping, timed and handshake-holding stalls;
 * - `delay(latencyMs, forMs)`: adds latency to every chunk, order kept; `heal()` ends any
 *   stall or latency at once.
 *
 * @example
 * const proxy = await TcpProxy.start({ host: '127.0.0.1', port: 4222 });
 * proxy.stall(); … await proxy.resume();
 */
export class TcpProxy {
  private server: Server | undefined;
  readonly #links = new Set<Link>();
  readonly #faults = new LinkFaults();
  readonly #hangUp: HangUp;
  #newConnections: 'paused' | 'held' = 'paused';
  #stallTimer: NodeJS.Timeout | undefined;
  #latencyTimer: NodeJS.Timeout | undefined;
  #accepted = 0;

  private constructor(
    readonly target: Address,
    public port: number,
    hangUp: HangUp,
  ) {
    this.#hangUp = hangUp;
  }

  /** Listens on `port` (a number, or `options.port`; default: a free one) and forwards to `target`. */
  static async start(target: Address, options: number | TcpProxyOptions = {}): Promise<TcpProxy> {
    const { port = 0, hangUp = 'end' } = typeof options === 'number' ? { port: options } : options;
    const proxy = new TcpProxy(target, port, hangUp);
    await proxy.listen();
    return proxy;
  }

  get address(): Address {
    return { host: '127.0.0.1', port: this.port };
  }

  /** Connections open now. */
  get connections(): number {
    return this.#links.size;
  }

  /** Connections accepted over the proxy's life. */
  get accepted(): number {
    return this.#accepted;
  }

  get stalled(): boolean {
    return this.#faults.stalled;
  }

  private listen(): Promise<void> {
    const server = createServer((client) => this.accept(client));
    this.server = server;
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => {
        const a = server.address();
        if (a && typeof a === 'object') this.port = a.port;
        resolve();
      });
    });
  }

  private accept(client: Socket): void {
    this.#accepted++;
    const link = new Link(client, this.#faults, this.#hangUp, () => this.#links.delete(link));
    this.#links.add(link);
    if (this.#faults.stalled && this.#newConnections === 'held') {
      // Not connected to the target until the stall ends (nothing read from the client meanwhile).
      client.pause();
      void this.#faults.released().then(() => link.connect(this.target));
    } else link.connect(this.target);
  }

  /** Drops every connection and refuses new ones. */
  async cut(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const link of [...this.#links]) link.drop(this.#hangUp);
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** The same as `cut()`: connections are refused (and the open ones dropped) until `resume()`. */
  refuse(): Promise<void> {
    return this.cut();
  }

  /** Accepts connections again, on the same port. */
  async restore(): Promise<void> {
    if (!this.server) await this.listen();
  }

  /** Sends an RST on every open connection (both legs); new ones are accepted as usual. */
  reset(): void {
    for (const link of [...this.#links]) link.drop('reset');
  }

  /** Stops forwarding, keeping the sockets open (a stall while stalled changes it; one `resume()` ends it). */
  stall(options: StallOptions = {}): void {
    this.#faults.stall(options.only, options.drop === true);
    this.#newConnections = options.newConnections ?? 'paused';
    clearTimeout(this.#stallTimer);
    this.#stallTimer =
      options.forMs === undefined ? undefined : setTimeout(() => this.#unstall(), options.forMs);
    for (const link of this.#links) {
      link.hold();
      // A dropping stall reads on (and discards), also where an earlier stall paused the reading.
      if (options.drop === true) link.flow();
    }
  }

  /** Ends a stall (held bytes go first, in order) and, after `cut()`/`refuse()`, listens again. */
  async resume(): Promise<void> {
    this.#unstall();
    await this.restore();
  }

  /** Adds `latencyMs` to every chunk (each direction, order kept) for `forMs`. */
  delay(latencyMs: number, forMs: number): void {
    this.#faults.latencyMs = latencyMs;
    clearTimeout(this.#latencyTimer);
    this.#latencyTimer = setTimeout(() => {
      this.#faults.latencyMs = 0;
    }, forMs);
  }

  /** Ends any stall or latency at once (a `cut()` stays: `restore()` ends it). */
  heal(): void {
    this.#unstall();
    clearTimeout(this.#latencyTimer);
    this.#faults.latencyMs = 0;
  }

  async close(): Promise<void> {
    await this.cut();
    this.heal();
  }

  #unstall(): void {
    clearTimeout(this.#stallTimer);
    this.#stallTimer = undefined;
    this.#faults.unstall();
    for (const link of this.#links) link.flow();
  }
}
