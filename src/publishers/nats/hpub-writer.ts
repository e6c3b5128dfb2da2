/**
 * The pipeline's publishes written as protocol bytes, a batch at a time. `nc.publish()` builds
 * a protocol line string per message, encodes it, checks the subject, queues three arrays in
 * the client's outbound buffer and copies them into one block per 32 KB: about a fifth of the
 * relay's CPU went to that and the socket writes it causes. Here each `HPUB` (line, header
 * block, payload, CRLF) is copied once into a chunk, and the chunk is handed to the client's
 * connection in 64 KB writes, through the same outbound buffer `nc.publish()` fills (so the
 * client's reconnect and flush rules are unchanged).
 *
 * A chunk's bytes are never written over while the socket may still hold them: a full chunk
 * is retired under the token of the last message written into it, and comes back for reuse
 * only when that message's PubAck arrives (the server read it, so it read everything before
 * it). A chunk whose last message gets no PubAck is left to the garbage collector. Reuse keeps
 * the relay's memory flat: a 100,000-event drain otherwise leaves ~80 MB of chunks for the
 * collector, outside the JS heap. The caller sends through `nc.publish()`
 * whatever `write` declines: a client without the protocol handler this reaches (nats.js 3),
 * a closed or draining connection, a message over the server's max_payload; the client's
 * own error then says why.
 */
import type { NatsConnection } from '@nats-io/transport-node';

/** The bytes handed to the connection per socket write (loopback TCP carries 64 KB a segment). */
export const WRITE_BYTES = 64 * 1024;
/** A chunk holds several writes; a message larger than what is left takes a new one. */
const CHUNK_BYTES = 4 * WRITE_BYTES;
/** Chunks kept for reuse, and retired chunks awaiting their last PubAck, at most. */
const SPARE_CHUNKS = 4;
const RETIRED_CHUNKS = 64;

/** What this reaches of the client's protocol handler (nats.js 3: `nc.protocol`). */
interface Protocol {
  sendCommand(cmd: Uint8Array): void;
  flushPending(): void;
  readonly info?: { readonly max_payload?: number };
  readonly noMorePublishing?: boolean;
}

function protocolOf(nc: NatsConnection): Protocol | undefined {
  const protocol = (nc as unknown as { protocol?: Partial<Protocol> }).protocol;
  if (typeof protocol?.sendCommand !== 'function' || typeof protocol.flushPending !== 'function') {
    return undefined;
  }
  return protocol as Protocol;
}

export class HpubWriter {
  readonly #nc: NatsConnection;
  readonly #protocol: Protocol | undefined;
  #chunk: Buffer = Buffer.allocUnsafeSlow(CHUNK_BYTES);
  /** Bytes written into #chunk. */
  #length = 0;
  /** Bytes of #chunk handed to the connection. */
  #sent = 0;
  /** Token of the last message written into #chunk; -1 for none. */
  #lastToken = -1;
  /** Full chunks by the token of their last message, until its PubAck. */
  readonly #retired = new Map<number, Buffer>();
  /** Chunks whose every byte reached the server, ready for reuse. */
  readonly #spare: Buffer[] = [];

  constructor(nc: NatsConnection) {
    this.#nc = nc;
    this.#protocol = protocolOf(nc);
  }

  /**
   * Writes `HPUB <subject> <reply> <header bytes> <total bytes>`, the header block and the
   * payload; false (nothing written) when the client must send this one itself.
   */
  write(token: number, subject: string, reply: string, headers: Uint8Array, payload: Uint8Array): boolean {
    const protocol = this.#protocol;
    if (protocol === undefined || protocol.noMorePublishing === true || this.#nc.isClosed()) return false;
    const total = headers.length + payload.length;
    const max = protocol.info?.max_payload;
    if (max !== undefined && total > max) return false;
    const line = `HPUB ${subject} ${reply} ${headers.length} ${total}\r\n`;
    // A subject is UTF-8: at most 3 bytes a UTF-16 unit.
    this.#reserve(line.length * 3 + total + 2);
    const out = this.#chunk;
    let at = this.#length;
    at += out.write(line, at, 'utf8');
    out.set(headers, at);
    at += headers.length;
    out.set(payload, at);
    at += payload.length;
    out[at] = 13;
    out[at + 1] = 10;
    this.#length = at + 2;
    this.#lastToken = token;
    if (this.#length - this.#sent >= WRITE_BYTES) this.flush();
    return true;
  }

  /** Hands what was written since the last flush to the connection, which writes it now. */
  flush(): void {
    if (this.#length === this.#sent) return;
    const protocol = this.#protocol!;
    protocol.sendCommand(this.#chunk.subarray(this.#sent, this.#length));
    protocol.flushPending();
    this.#sent = this.#length;
  }

  /** The PubAck of the message with `token` came: the chunk it ended, if any, can be reused. */
  acked(token: number): void {
    if (this.#retired.size === 0) return;
    const chunk = this.#retired.get(token);
    if (chunk === undefined) return;
    this.#retired.delete(token);
    if (this.#spare.length < SPARE_CHUNKS) this.#spare.push(chunk);
  }

  /** The connection dropped: what it had not sent is dropped or resent by the client; no retired chunk is reused. */
  disconnected(): void {
    this.#retired.clear();
  }

  /** Makes room for `bytes` more: what is written goes out, and another chunk is taken when this one is short. */
  #reserve(bytes: number): void {
    if (this.#chunk.length - this.#length >= bytes) return;
    this.flush();
    if (this.#lastToken >= 0 && this.#chunk.length === CHUNK_BYTES) {
      if (this.#retired.size >= RETIRED_CHUNKS) this.#retired.clear(); // PubAcks that never came
      this.#retired.set(this.#lastToken, this.#chunk);
    }
    this.#chunk =
      bytes <= CHUNK_BYTES
        ? (this.#spare.pop() ?? Buffer.allocUnsafeSlow(CHUNK_BYTES))
        : Buffer.allocUnsafeSlow(bytes);
    this.#length = 0;
    this.#sent = 0;
    this.#lastToken = -1;
  }
}
