import net from 'node:net';

/**
 * A TCP proxy in front of a port, for network faults a real service cannot be asked to make:
 * `hold()` stops forwarding both ways but keeps every socket open (a silent, half-dead network),
 * `release()` forwards again (what was held is delivered), `cut()` destroys every connection (a
 * reset), `close()` also stops listening.
 */
export interface TcpProxy {
  readonly port: number;
  /** Connections accepted so far. */
  readonly connections: number;
  hold(): void;
  release(): void;
  cut(): void;
  close(): Promise<void>;
}

interface Pair {
  readonly client: net.Socket;
  readonly upstream: net.Socket;
  readonly waiting: [net.Socket, Buffer][];
}

export async function startTcpProxy(target: { port: number; host?: string }): Promise<TcpProxy> {
  const host = target.host ?? '127.0.0.1';
  const pairs = new Set<Pair>();
  let held = false;
  let accepted = 0;

  const server = net.createServer((client) => {
    accepted++;
    const upstream = net.connect(target.port, host);
    const pair: Pair = { client, upstream, waiting: [] };
    pairs.add(pair);
    // Forwarded by hand (not pipe(): pipe resumes a source on the destination's 'drain', which would
    // undo a hold). While held both sockets are paused: data waits in the kernel buffers, and a chunk
    // already read waits here, until release.
    forward(pair, client, upstream);
    forward(pair, upstream, client);
    if (held) {
      client.pause();
      upstream.pause();
    }
    const drop = (): void => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop);
    upstream.on('error', drop);
    client.on('close', drop);
    upstream.on('close', drop);
  });
  function cut(): void {
    for (const { client, upstream } of pairs) {
      client.destroy();
      upstream.destroy();
    }
    pairs.clear();
  }

  function forward(pair: Pair, from: net.Socket, to: net.Socket): void {
    from.on('data', (chunk: Buffer) => {
      if (held) pair.waiting.push([to, chunk]);
      else to.write(chunk);
    });
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as net.AddressInfo).port;

  return {
    port,
    get connections() {
      return accepted;
    },
    hold() {
      held = true;
      for (const { client, upstream } of pairs) {
        client.pause();
        upstream.pause();
      }
    },
    release() {
      held = false;
      for (const pair of pairs) {
        for (const [to, chunk] of pair.waiting.splice(0)) to.write(chunk);
        pair.client.resume();
        pair.upstream.resume();
      }
    },
    cut,
    async close() {
      cut();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
