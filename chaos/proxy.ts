/**
 * A TCP fault proxy on 127.0.0.1 between one component and one server (PostgreSQL or the
 * broker): it forwards bytes both ways and, on demand, resets every connection (RST), stalls
 * (stops forwarding for N s, keeping the sockets open, and holds back new connections), or
 * adds latency to every chunk for N s (order kept).
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export class FaultProxy {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  private stallEnds: Promise<void> | undefined;
  private endStall: (() => void) | undefined;
  private stallTimer: NodeJS.Timeout | undefined;
  private latencyMs = 0;
  private latencyTimer: NodeJS.Timeout | undefined;
  /** Connections accepted over the proxy's life. */
  connections = 0;

  private constructor(
    readonly name: string,
    readonly targetPort: number,
    public port: number,
  ) {}

  static async start(name: string, targetPort: number, port = 0): Promise<FaultProxy> {
    const proxy = new FaultProxy(name, targetPort, port);
    await proxy.listen();
    return proxy;
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

  private track(socket: Socket): void {
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
  }

  private accept(client: Socket): void {
    this.connections++;
    this.track(client);
    client.pause();
    client.on('error', () => undefined);
    const open = (): void => {
      if (client.destroyed) return;
      const upstream = connect(this.targetPort, '127.0.0.1');
      this.track(upstream);
      const closeBoth = (): void => {
        client.destroy();
        upstream.destroy();
      };
      upstream.on('error', closeBoth);
      client.on('error', closeBoth);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
      this.forward(client, upstream);
      this.forward(upstream, client);
      client.resume();
    };
    // A stalled link holds new connections too: they open when the stall ends.
    if (this.stallEnds) void this.stallEnds.then(open);
    else open();
  }

  /** One direction: chunks in order, each held by a stall and delayed by the current latency. */
  private forward(from: Socket, to: Socket): void {
    let chain: Promise<void> = Promise.resolve();
    let queued = 0;
    from.on('data', (chunk: Buffer) => {
      const due = Date.now() + this.latencyMs;
      if (!this.stallEnds && this.latencyMs === 0 && queued === 0) {
        to.write(chunk);
        return;
      }
      queued++;
      if (this.stallEnds) from.pause();
      chain = chain.then(async () => {
        while (this.stallEnds) await this.stallEnds;
        const wait = due - Date.now();
        if (wait > 0) await sleep(wait);
        queued--;
        if (!to.destroyed) to.write(chunk);
        if (from.isPaused() && !this.stallEnds) from.resume();
      });
    });
  }

  /** Resets every open connection (RST to both sides); new ones are accepted as usual. */
  reset(): void {
    for (const s of this.sockets) s.resetAndDestroy();
    this.sockets.clear();
  }

  /** Stops forwarding for `ms`, keeping the sockets open. */
  stall(ms: number): void {
    if (!this.stallEnds) this.stallEnds = new Promise((resolve) => (this.endStall = resolve));
    clearTimeout(this.stallTimer);
    this.stallTimer = setTimeout(() => this.unstall(), ms);
  }

  private unstall(): void {
    clearTimeout(this.stallTimer);
    const end = this.endStall;
    this.stallEnds = undefined;
    this.endStall = undefined;
    // Each paused reader is resumed by its own queue once its held chunks went out.
    end?.();
  }

  /** Adds `latencyMs` to every chunk for `ms`. */
  delay(latencyMs: number, ms: number): void {
    this.latencyMs = latencyMs;
    clearTimeout(this.latencyTimer);
    this.latencyTimer = setTimeout(() => {
      this.latencyMs = 0;
    }, ms);
  }

  /** Ends any stall or latency at once. */
  heal(): void {
    this.unstall();
    clearTimeout(this.latencyTimer);
    this.latencyMs = 0;
  }

  async close(): Promise<void> {
    this.heal();
    const server = this.server;
    this.server = undefined;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
