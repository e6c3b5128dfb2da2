import { connect, createServer, type Server, type Socket } from 'node:net';

export interface Address {
  readonly host: string;
  readonly port: number;
}

/**
 * A TCP proxy on 127.0.0.1 in front of a broker, for failure tests: `cut()`
 * drops every connection and refuses new ones (as a stopped broker would);
 * `restore()` accepts again on the same port.
 */
export class TcpProxy {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();

  private constructor(
    readonly target: Address,
    public port: number,
  ) {}

  static async start(target: Address, port = 0): Promise<TcpProxy> {
    const proxy = new TcpProxy(target, port);
    await proxy.listen();
    return proxy;
  }

  get address(): Address {
    return { host: '127.0.0.1', port: this.port };
  }

  private listen(): Promise<void> {
    const server = createServer((client) => this.pipe(client));
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

  private pipe(client: Socket): void {
    const upstream = connect(this.target.port, this.target.host);
    for (const s of [client, upstream]) {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
      s.on('error', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  }

  /** Drops every connection and refuses new ones. */
  async cut(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** Accepts connections again, on the same port. */
  async restore(): Promise<void> {
    if (!this.server) await this.listen();
  }

  async close(): Promise<void> {
    await this.cut();
  }
}
