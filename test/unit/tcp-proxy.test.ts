/** The one TCP fault proxy (tx-outbox/testing) on loopback, in front of local servers: no broker needed. */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type StallOptions, TcpProxy, type TcpProxyOptions } from '../../src/testing/tcp-proxy.js';

/** A local server that echoes, and keeps its side of each connection for the test. */
class Target {
  readonly sockets: Socket[] = [];
  private constructor(
    readonly server: Server,
    readonly echo: boolean,
  ) {}

  static async start(echo = true): Promise<Target> {
    const target: Target = new Target(
      createServer((s) => {
        target.sockets.push(s);
        s.on('error', () => undefined);
        if (target.echo) s.pipe(s);
      }),
      echo,
    );
    await new Promise<void>((resolve) => target.server.listen(0, '127.0.0.1', resolve));
    return target;
  }

  get address(): { host: string; port: number } {
    const a = this.server.address();
    return { host: '127.0.0.1', port: typeof a === 'object' && a ? a.port : 0 };
  }

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

let echo: Target;
const cleanups: Array<() => unknown> = [];

beforeAll(async () => {
  echo = await Target.start();
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
afterAll(() => echo.close());

async function proxyTo(target: Target, options?: TcpProxyOptions): Promise<TcpProxy> {
  const proxy = await TcpProxy.start(target.address, options);
  cleanups.push(() => proxy.close());
  return proxy;
}

async function client(proxy: TcpProxy): Promise<Socket> {
  const socket = connect(proxy.port, '127.0.0.1');
  cleanups.push(() => socket.destroy());
  await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  return socket;
}

/** Everything `socket` receives, as text. */
function received(socket: Socket): { text: () => string; until: (text: string) => Promise<number> } {
  let got = '';
  const started = Date.now();
  socket.on('data', (chunk: Buffer) => {
    got += chunk.toString();
  });
  return {
    text: () => got,
    until: async (text) => {
      while (!got.includes(text)) await sleep(5);
      return Date.now() - started;
    },
  };
}

/** How `socket` ends: the error code, or 'closed' for a clean close. */
function ending(socket: Socket): Promise<string> {
  return new Promise((resolve) => {
    socket.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
    socket.once('close', () => resolve('closed'));
  });
}

/** Ends the stall, sends `text` and returns all `got` holds once it arrived (and a moment passed). */
async function afterResume(proxy: TcpProxy, s: Socket, got: ReturnType<typeof received>, text: string) {
  await proxy.resume();
  s.write(text);
  await got.until(text);
  await sleep(100);
  return got.text();
}

/** Waits (up to 5 s) until `read()` gives `expected`; then expects it, so a miss names both values. */
async function countsReach(read: () => number, expected: number): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (read() !== expected && Date.now() < deadline) await sleep(5);
  expect(read()).toBe(expected);
}

/** A silent target behind a proxy, one client connected: both ends of the link, to watch each way. */
async function oneLink(): Promise<{
  proxy: TcpProxy;
  s: Socket;
  got: ReturnType<typeof received>;
  far: Socket;
  server: ReturnType<typeof received>;
}> {
  const target = await Target.start(false);
  cleanups.push(() => target.close());
  const proxy = await proxyTo(target);
  const s = await client(proxy);
  const got = received(s);
  while (target.sockets.length === 0) await sleep(5);
  const far = target.sockets[0]!;
  return { proxy, s, got, far, server: received(far) };
}

describe('TcpProxy: forwarding', () => {
  it('forwards both ways in order; counts open and accepted connections', async () => {
    const proxy = await proxyTo(echo);
    const s = await client(proxy);
    const got = received(s);
    for (let i = 0; i < 50; i++) s.write(`${i},`);
    await got.until('49,');
    expect(got.text()).toBe(Array.from({ length: 50 }, (_, i) => `${i},`).join(''));
    await client(proxy);
    // Waited for, not slept on: the proxy sees the connect and the close a moment after the
    // client does, later on a loaded machine (a fixed 20 / 50 ms failed there).
    await countsReach(() => proxy.connections, 2);
    s.destroy();
    await countsReach(() => proxy.connections, 1);
    expect(proxy.accepted).toBe(2);
  });

  it('keeps the start(target, port) form and listens on that port', async () => {
    const first = await proxyTo(echo);
    const port = first.port;
    await first.close();
    const again = await TcpProxy.start(echo.address, port);
    cleanups.push(() => again.close());
    expect(again.port).toBe(port);
    expect(again.address).toEqual({ host: '127.0.0.1', port });
  });

  it("a server's clean close reaches the client as a close ('end'), or as an RST ('reset')", async () => {
    for (const [hangUp, expected] of [
      ['end', 'closed'],
      ['reset', 'ECONNRESET'],
    ] as const) {
      const target = await Target.start(false);
      cleanups.push(() => target.close());
      const proxy = await proxyTo(target, { hangUp });
      const s = await client(proxy);
      const got = received(s);
      while (target.sockets.length === 0) await sleep(5);
      const ended = ending(s);
      target.sockets[0]!.end('bye');
      expect(await ended).toBe(expected);
      if (hangUp === 'end') expect(got.text()).toBe('bye');
    }
  });
});

describe('TcpProxy: stall', () => {
  it('holds the bytes with the sockets open, and delivers them in order on resume()', async () => {
    const proxy = await proxyTo(echo);
    const s = await client(proxy);
    const got = received(s);
    s.write('a');
    await got.until('a');
    proxy.stall();
    expect(proxy.stalled).toBe(true);
    for (const part of ['b', 'c', 'd']) s.write(part);
    await sleep(200);
    expect(got.text()).toBe('a');
    expect(s.destroyed).toBe(false);
    await proxy.resume();
    await got.until('abcd');
    expect(got.text()).toBe('abcd');
  });

  it('a stall in the middle of a large transfer: every byte arrives once, in order', async () => {
    const proxy = await proxyTo(echo);
    const s = await client(proxy);
    const data = Buffer.from(Array.from({ length: 1_000_000 }, (_, i) => `${i}.`).join(''));
    const chunks: Buffer[] = [];
    let length = 0;
    const all = new Promise<void>((resolve) =>
      s.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        length += chunk.length;
        if (length >= data.length) resolve();
      }),
    );
    s.write(data);
    await sleep(5);
    proxy.stall();
    await sleep(100);
    const held = length;
    await sleep(100);
    expect(length).toBe(held);
    expect(held).toBeLessThan(data.length);
    await proxy.resume();
    await all;
    expect(Buffer.concat(chunks).equals(data)).toBe(true);
  });

  it("a connection accepted during a stall: 'paused' connects to the target at once, 'held' when it ends", async () => {
    for (const newConnections of ['paused', 'held'] as const) {
      const target = await Target.start();
      cleanups.push(() => target.close());
      const proxy = await proxyTo(target);
      proxy.stall({ newConnections });
      const late = await client(proxy);
      const got = received(late);
      late.write('late');
      await sleep(200);
      expect(target.sockets.length).toBe(newConnections === 'paused' ? 1 : 0);
      expect(got.text()).toBe('');
      expect(proxy.connections).toBe(1);
      await proxy.resume();
      await got.until('late');
      expect(target.sockets.length).toBe(1);
    }
  });

  it("only: 'upstream' holds what the client sends; the target's bytes still arrive", async () => {
    const { proxy, s, got, far, server } = await oneLink();
    proxy.stall({ only: 'upstream' });
    s.write('ask');
    far.write('answer');
    await got.until('answer');
    await sleep(150);
    expect(server.text()).toBe('');
    await proxy.resume();
    await server.until('ask');
  });

  it("only: 'downstream' lets the client's bytes through and holds the target's until resume()", async () => {
    const { proxy, s, got, far, server } = await oneLink();
    proxy.stall({ only: 'downstream' });
    s.write('ask');
    await server.until('ask');
    far.write('answer');
    await sleep(150);
    expect(got.text()).toBe('');
    expect(s.destroyed).toBe(false);
    await proxy.resume();
    await got.until('answer');
  });

  it('drop: the bytes sent during the stall are discarded (none after resume()), the sockets stay open', async () => {
    const proxy = await proxyTo(echo);
    const s = await client(proxy);
    const got = received(s);
    proxy.stall({ drop: true });
    expect(proxy.stalled).toBe(true);
    for (const part of ['b', 'c']) s.write(part);
    await sleep(150);
    expect(got.text()).toBe('');
    expect(s.destroyed).toBe(false);
    expect(await afterResume(proxy, s, got, 'd')).toBe('d');
  });

  it("drop: the proxy reads on, so the sender's writes never back up (a holding stall backs them up)", async () => {
    const big = Buffer.alloc(32 * 1024 * 1024, 'x');
    for (const drop of [true, false]) {
      const { proxy, s, server } = await oneLink();
      proxy.stall({ drop });
      s.write(big);
      const started = Date.now();
      while (s.writableLength > 0 && Date.now() - started < 3_000) await sleep(20);
      expect(s.writableLength === 0).toBe(drop);
      expect(server.text()).toBe('');
      s.destroy();
    }
  });

  it("only: 'upstream' with drop: what the client sends is lost, the target's bytes still arrive", async () => {
    const { proxy, s, got, far, server } = await oneLink();
    proxy.stall({ only: 'upstream', drop: true });
    s.write('lost');
    far.write('answer');
    await got.until('answer');
    await sleep(150);
    await proxy.resume();
    s.write('again');
    await server.until('again');
    expect(server.text()).toBe('again');
  });

  it('a dropping stall after a holding one reads on: what waited unread is lost too', async () => {
    const proxy = await proxyTo(echo);
    const s = await client(proxy);
    const got = received(s);
    proxy.stall();
    s.write('waiting,');
    await sleep(100);
    proxy.stall({ drop: true });
    await sleep(50);
    s.write('lost,');
    await sleep(100);
    expect(got.text()).toBe('');
    expect(await afterResume(proxy, s, got, 'after')).toBe('after');
  });

  it('forMs: ends by itself; a stall while stalled restarts the clock', async () => {
    const proxy = await proxyTo(echo);
    const s = await client(proxy);
    const got = received(s);
    const options: StallOptions = { forMs: 300 };
    proxy.stall(options);
    s.write('x');
    await sleep(150);
    proxy.stall(options); // now ends ~450 ms after the first
    const ms = await got.until('x');
    expect(ms).toBeGreaterThanOrEqual(400);
    expect(proxy.stalled).toBe(false);
  });

  it('heal() ends a stall and a latency at once', async () => {
    const proxy = await proxyTo(echo);
    const s = await client(proxy);
    const got = received(s);
    proxy.stall({ forMs: 60_000 });
    proxy.delay(60_000, 60_000);
    s.write('now');
    await sleep(100);
    proxy.heal();
    const ms = await got.until('now');
    expect(ms).toBeLessThan(1_000);
  });
});

describe('TcpProxy: delay', () => {
  it('adds the latency to every chunk, both ways, order kept; then none', async () => {
    const proxy = await proxyTo(echo);
    const s = await client(proxy);
    const got = received(s);
    proxy.delay(150, 600);
    const started = Date.now();
    for (let i = 0; i < 20; i++) s.write(`${i};`);
    await got.until('19;');
    expect(Date.now() - started).toBeGreaterThanOrEqual(280); // there and back
    expect(got.text()).toBe(Array.from({ length: 20 }, (_, i) => `${i};`).join(''));
    await sleep(700);
    const before = Date.now();
    s.write('fast');
    await got.until('fast');
    expect(Date.now() - before).toBeLessThan(100);
  });
});

describe('TcpProxy: reset, refuse, cut', () => {
  it('reset(): every open connection gets ECONNRESET; new ones work', async () => {
    const proxy = await proxyTo(echo);
    const s = await client(proxy);
    const ended = ending(s);
    proxy.reset();
    expect(await ended).toBe('ECONNRESET');
    expect(proxy.connections).toBe(0);
    const again = await client(proxy);
    const got = received(again);
    again.write('back');
    await got.until('back');
  });

  for (const [off, on] of [
    ['refuse', 'resume'],
    ['cut', 'restore'],
  ] as const) {
    it(`${off}(): drops the open connections and refuses new ones; ${on}() listens on the same port`, async () => {
      const proxy = await proxyTo(echo);
      const port = proxy.port;
      const s = await client(proxy);
      const ended = ending(s);
      await proxy[off]();
      expect(await ended).toBe('closed');
      const refused = connect(port, '127.0.0.1');
      expect(await ending(refused)).toBe('ECONNREFUSED');
      await proxy[on]();
      expect(proxy.port).toBe(port);
      const again = await client(proxy);
      const got = received(again);
      again.write('up');
      await got.until('up');
    });
  }

  it("hangUp 'reset': cut() sends an RST", async () => {
    const proxy = await proxyTo(echo, { hangUp: 'reset' });
    const s = await client(proxy);
    const ended = ending(s);
    await proxy.cut();
    expect(await ended).toBe('ECONNRESET');
  });
});
