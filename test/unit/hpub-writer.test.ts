import type { NatsConnection } from '@nats-io/transport-node';
import { describe, expect, it } from 'vitest';
import { HpubWriter, WRITE_BYTES } from '../../src/publishers/nats/hpub-writer.js';

/** What the writer hands the connection: the view, a copy taken then, and the token range it carries. */
interface Sent {
  readonly view: Uint8Array;
  readonly copy: Buffer;
}

function fakeConnection(sent: Sent[], maxPayload = 1 << 20): NatsConnection {
  const protocol = {
    info: { max_payload: maxPayload },
    sendCommand(cmd: Uint8Array) {
      sent.push({ view: cmd, copy: Buffer.from(cmd) });
    },
    flushPending() {},
  };
  return { protocol, isClosed: () => false } as unknown as NatsConnection;
}

const payload = (i: number) => Buffer.alloc(10_000, i % 251);
const headers = Buffer.from('NATS/1.0\r\nNats-Msg-Id: x\r\n\r\n');

describe('HpubWriter', () => {
  it('writes HPUB line, headers, payload and CRLF, in writes of at least 64 KB until the last', () => {
    const sent: Sent[] = [];
    const writer = new HpubWriter(fakeConnection(sent));
    for (let i = 0; i < 20; i++) expect(writer.write(i, `s.${i}`, `r.${i}`, headers, payload(i))).toBe(true);
    writer.flush();
    const all = Buffer.concat(sent.map((s) => s.copy));
    const first = `HPUB s.0 r.0 ${headers.length} ${headers.length + 10_000}\r\n`;
    expect(all.subarray(0, first.length).toString()).toBe(first);
    let expected = 0;
    for (let i = 0; i < 20; i++) {
      const line = `HPUB s.${i} r.${i} ${headers.length} ${headers.length + 10_000}\r\n`;
      expect(all.subarray(expected, expected + line.length).toString()).toBe(line);
      expected += line.length;
      expect(all.subarray(expected, expected + headers.length).equals(headers)).toBe(true);
      expected += headers.length;
      expect(all.subarray(expected, expected + 10_000).equals(payload(i))).toBe(true);
      expected += 10_002;
      expect(all.subarray(expected - 2, expected).toString()).toBe('\r\n');
    }
    expect(all.length).toBe(expected);
    for (const s of sent.slice(0, -1)) expect(s.view.length).toBeGreaterThanOrEqual(WRITE_BYTES);
  });

  it('never writes over bytes handed to the connection before the PubAck of the last message in their chunk', () => {
    const sent: Sent[] = [];
    const writer = new HpubWriter(fakeConnection(sent));
    let token = 0;
    const write = (n: number) => {
      for (let i = 0; i < n; i++, token++) writer.write(token, 's', `r.${token}`, headers, payload(token));
    };
    write(200); // several chunks retired, none acknowledged
    const unacked = sent.length;
    write(200);
    for (const s of sent) expect(Buffer.compare(Buffer.from(s.view), s.copy)).toBe(0);
    // Everything so far acknowledged: the retired chunks come back for reuse.
    for (let t = 0; t < token; t++) writer.acked(t);
    const before = sent.length;
    write(200);
    writer.flush();
    const buffers = new Set(sent.slice(0, before).map((s) => s.view.buffer));
    expect(sent.slice(before).some((s) => buffers.has(s.view.buffer))).toBe(true); // reused
    // Bytes not acknowledged are intact still: the last chunk retired before the acks is one.
    expect(unacked).toBeGreaterThan(0);
  });

  it('reuses no chunk whose last PubAck never came, nor one acknowledged after a disconnect', () => {
    for (const disconnect of [false, true]) {
      const sent: Sent[] = [];
      const writer = new HpubWriter(fakeConnection(sent));
      let token = 0;
      const write = (n: number) => {
        for (let i = 0; i < n; i++, token++) writer.write(token, 's', `r.${token}`, headers, payload(token));
      };
      write(200);
      if (disconnect) {
        writer.disconnected();
        for (let t = 0; t < token; t++) writer.acked(t); // late: the connection they came on is gone
      }
      write(200);
      writer.flush();
      for (const s of sent) expect(Buffer.compare(Buffer.from(s.view), s.copy)).toBe(0);
    }
  });

  it('declines what the client must send itself: over max_payload', () => {
    const sent: Sent[] = [];
    const writer = new HpubWriter(fakeConnection(sent, 5_000));
    expect(writer.write(0, 's', 'r.0', headers, payload(0))).toBe(false);
    writer.flush();
    expect(sent).toEqual([]);
  });
});
