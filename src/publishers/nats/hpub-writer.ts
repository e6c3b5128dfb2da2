/**
 * The pipeline's publishes written as protocol bytes, a batch at a time. `nc.publish()` builds
 * a protocol line string per message, encodes it, checks the subject, queues three arrays in
 * the client's outbound buffer and copies them into one block per 32 KB: about a fifth of the
 * relay's CPU went to that and the socket writes it causes. Here each `HPUB` (line, header
 * block, payload, CRLF) is copied once into a chunk, and the chunk is handed to the client's
 * connection in 64 KB writes, through the same outbound buffer `nc.publish()` fills (so the
 * client's reconnect and flush rules are unchanged).
 *
 * A chunk's bytes are never written over once handed over (the socket may still hold them);
 * a new chunk is taken when the current one is full. The caller sends through `nc.publish()`
 * whatever `write` declines: a client without the protocol handler this reaches (nats.js 3),
 * a closed or draining connection, a message over the server's max_payload; the client's
 * own error then says why.
 */
import type { NatsConnection } from '@nats-io/transport-node';

/** The bytes handed to the connection per socket write (loopback TCP carries 64 KB a segment). */
export const WRITE_BYTES = 64 * 1024;
/** A chunk holds several writes; a message larger than what is left takes a new one. */
const CHUNK_BYTES = 4 * WRITE_BYTES;

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

  constructor(nc: NatsConnection) {
    this.#nc = nc;
    this.#protocol = protocolOf(nc);
  }

  /**
   * Writes `HPUB <subject> <reply> <header bytes> <total bytes>`, the header block and the
   * payload; false (nothing written) when the client must send this one itself.
   */
  write(subject: string, reply: string, headers: Uint8Array, payload: Uint8Array): boolean {
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

  /** Makes room for `bytes` more: what is written goes out, and a new chunk is taken when this one is short. */
  #reserve(bytes: number): void {
    if (this.#chunk.length - this.#length >= bytes) return;
    this.flush();
    this.#chunk = Buffer.allocUnsafeSlow(Math.max(CHUNK_BYTES, bytes));
    this.#length = 0;
    this.#sent = 0;
  }
}
