import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';

/** One client connection and its upstream leg. */
interface Link {
  readonly client: Socket;
  readonly upstream: Socket;
}

/**
 * A TCP proxy in front of a real server that a test can break the way networks break:
 *
 * - `stall()`: stops forwarding in both directions (or `{ only: 'upstream' }`: the client's
 *   direction) but keeps every socket open, like a
 *   network that silently holds packets (a half-open link: the client sees no error, its
 *   writes just get no answers); new connections are accepted and stalled too;
 * - `resume()`: forwards again, held bytes first (TCP would retransmit them), and listens
 *   again after `refuse()`;
 * - `reset()`: destroys every connection now (RST); the listener stays;
 * - `refuse()`: stops listening (connections are refused) and resets the open ones.
 *
 * @example
 * const proxy = await FaultProxy.start(4222);
 * proxy.stall(); … proxy.resume();
 */
export class FaultProxy {
  readonly #links = new Set<Link>();
  #server: Server | undefined;
  #stalled = false;
  #upstreamOnly = false;

  private constructor(
    private listenPort: number,
    readonly targetPort: number,
    readonly targetHost: string,
  ) {}

  /** Listens on `port` (default: a free one) of 127.0.0.1 and forwards to `targetHost:targetPort`. */
  static async start(
    targetPort: number,
    options: { port?: number; targetHost?: string } = {},
  ): Promise<FaultProxy> {
    const proxy = new FaultProxy(options.port ?? 0, targetPort, options.targetHost ?? '127.0.0.1');
    proxy.listenPort = await proxy.#listen();
    return proxy;
  }

  /** The port it listens on (the same again after `refuse()` and `resume()`). */
  get port(): number {
    return this.listenPort;
  }

  /** Open client connections. */
  get connections(): number {
    return this.#links.size;
  }

  get stalled(): boolean {
    return this.#stalled;
  }

  /**
   * `only: 'upstream'` holds just what the client sends (the server's traffic still reaches
   * it: a one-way loss, or the moment a stall begins while answers are on their way).
   */
  stall(options: { only?: 'upstream' } = {}): void {
    this.#stalled = true;
    this.#upstreamOnly = options.only === 'upstream';
    for (const link of this.#links) this.#pause(link);
  }

  async resume(): Promise<void> {
    this.#stalled = false;
    for (const { client, upstream } of this.#links) {
      client.resume();
      upstream.resume();
    }
    if (this.#server === undefined) await this.#listen();
  }

  reset(): void {
    for (const link of [...this.#links]) this.#drop(link);
  }

  async refuse(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    this.reset();
    if (server !== undefined) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  async close(): Promise<void> {
    await this.refuse();
  }

  #listen(): Promise<number> {
    const server = createServer((client) => this.#accept(client));
    this.#server = server;
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.listenPort, '127.0.0.1', () => {
        server.off('error', reject);
        const address = server.address();
        resolve(typeof address === 'object' && address !== null ? address.port : this.listenPort);
      });
    });
  }

  #accept(client: Socket): void {
    const upstream = tcpConnect(this.targetPort, this.targetHost);
    const link = { client, upstream };
    this.#links.add(link);
    // Forwarded by hand, not with pipe(): a pipe resumes its source on 'drain', even while stalled.
    client.on('data', (chunk: Buffer) => upstream.write(chunk));
    upstream.on('data', (chunk: Buffer) => client.write(chunk));
    if (this.#stalled) this.#pause(link);
    const drop = (): void => this.#drop(link);
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
  }

  #pause({ client, upstream }: Link): void {
    client.pause();
    if (!this.#upstreamOnly) upstream.pause();
  }

  #drop(link: Link): void {
    if (!this.#links.delete(link)) return;
    link.client.resetAndDestroy();
    link.upstream.resetAndDestroy();
  }
}
