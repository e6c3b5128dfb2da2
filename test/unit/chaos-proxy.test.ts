/** The chaos harness's fault proxy on loopback, in front of an echo server: stall, latency, reset. */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FaultProxy } from '../../chaos/proxy.js';

let echo: Server;
let proxy: FaultProxy;

beforeAll(async () => {
  echo = createServer((s) => s.pipe(s));
  await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve));
  const address = echo.address();
  proxy = await FaultProxy.start('test', typeof address === 'object' && address ? address.port : 0);
});
afterAll(async () => {
  await proxy.close();
  await new Promise((resolve) => echo.close(resolve));
});

async function client(): Promise<Socket> {
  const socket = connect(proxy.port, '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  return socket;
}

/** Sends `text` and resolves with the ms until all of it echoed back. */
function roundTrip(socket: Socket, text: string): Promise<number> {
  const started = Date.now();
  let got = '';
  return new Promise((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      got += chunk.toString();
      if (got === text) {
        socket.off('data', onData);
        resolve(Date.now() - started);
      }
    };
    socket.on('data', onData);
    socket.once('error', reject);
    socket.write(text);
  });
}

describe('FaultProxy', () => {
  it('forwards both ways, in order', async () => {
    const s = await client();
    expect(await roundTrip(s, 'hello')).toBeLessThan(500);
    s.destroy();
  });

  it('stall: holds the bytes, sockets open, and delivers them in order when it ends', async () => {
    const s = await client();
    proxy.stall(600);
    const late = await client(); // a connection opened during the stall waits too
    const [ms, lateMs] = await Promise.all([roundTrip(s, 'one two three'), roundTrip(late, 'four')]);
    expect(ms).toBeGreaterThanOrEqual(500);
    expect(lateMs).toBeGreaterThanOrEqual(400);
    expect(s.destroyed).toBe(false);
    s.destroy();
    late.destroy();
  });

  it('latency: each chunk delayed while it lasts, then none', async () => {
    const s = await client();
    proxy.delay(150, 1_000);
    expect(await roundTrip(s, 'slow')).toBeGreaterThanOrEqual(280); // both directions
    await new Promise((r) => setTimeout(r, 1_100));
    expect(await roundTrip(s, 'fast')).toBeLessThan(100);
    s.destroy();
  });

  it('reset: every open connection gets a reset; new ones work', async () => {
    const s = await client();
    const closed = new Promise<string | undefined>((resolve) => {
      s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code));
      s.once('close', () => resolve(undefined));
    });
    proxy.reset();
    expect(await closed).toBe('ECONNRESET');
    const again = await client();
    expect(await roundTrip(again, 'back')).toBeLessThan(500);
    again.destroy();
  });
});
