/**
 * The lean JetStream publish technique of the broker ceiling's `raw` loop (broker-ceiling.ts),
 * as a piece a relay can drive batch by batch: core NATS publishes with a reply subject each,
 * ONE wildcard subscription for every PubAck, an ack table indexed by the reply token, no
 * promise or timer per message (LeanJetStream: bench/nats-publish-cpu.ts). The header block is
 * the CloudEvents NATS binding as natsPublisher writes it (envelopeHeaders(m, source, 'nats') +
 * Nats-Msg-Id + the expected stream), built as one string per message, so the server does the
 * same work for each. LeanBatchPublisher, below, is the lean reference relay's: leaner still, the
 * header block the caller's (`Nats-Msg-Id` alone, or what tx-outbox's publisher sends).
 */
import {
  createInbox,
  type Msg,
  MsgHdrsImpl,
  type NatsConnection,
  type PublishOptions,
} from '@nats-io/transport-node';
import { SEQUENCE_DIGITS } from '../../src/envelope/attributes.js';
import { percentEncode } from '../../src/envelope/percent.js';

/** A header object whose encoding is set per message (the client only calls `encode()`). */
export class RawHeaders extends MsgHdrsImpl {
  bytes: Uint8Array = new Uint8Array(0);

  override encode(): Uint8Array {
    return this.bytes;
  }
}

/** `{"s`: a PubAck starts `{"stream"`, a JetStream error reply `{"error"`. */
export function isPubAck(data: Uint8Array): boolean {
  return data.length > 2 && data[2] === 0x73;
}

/** The base-36 token after `from` in a reply subject. */
export function replyToken(subject: string, from: number): number {
  let token = 0;
  for (let i = from; i < subject.length; i += 1) {
    const c = subject.charCodeAt(i);
    token = token * 36 + (c <= 57 ? c - 48 : c - 87);
  }
  return token;
}

/** One event as a relay reads it from its row. */
export interface LeanEvent {
  readonly eventId: string;
  readonly aggregateType: string;
  readonly aggregateId: string;
  readonly sequence: string;
  readonly sequenceBase: number;
  readonly type: string;
  readonly schemaVersion: number;
  readonly subject: string;
  readonly payload: Uint8Array;
  readonly contentType: string;
  readonly createdAt: Date;
  /** The row's own headers (written first, as envelopeHeaders does). */
  readonly headers: Readonly<Record<string, string>>;
}

/** Percent-encoded values that repeat from row to row (source, types, content types). */
const encoded = new Map<string, string>();

function encodeRepeated(value: string): string {
  let e = encoded.get(value);
  if (e === undefined) {
    e = percentEncode(value);
    if (encoded.size > 1024) encoded.clear();
    encoded.set(value, e);
  }
  return e;
}

/** The NATS header block of one event: the envelope in natsPublisher's order, Nats-Msg-Id, expected stream. */
export function leanHeaderBlock(event: LeanEvent, source: string, stream: string): Uint8Array {
  let text = 'NATS/1.0';
  for (const name in event.headers) text += `\r\n${name}: ${event.headers[name]}`;
  const id = percentEncode(event.eventId);
  const aggregateId = percentEncode(event.aggregateId);
  const sequence = event.sequence;
  text +=
    '\r\nce-specversion: 1.0\r\nce-id: ' +
    id +
    '\r\nce-source: ' +
    encodeRepeated(source) +
    '\r\nce-type: ' +
    encodeRepeated(event.type) +
    '\r\nce-time: ' +
    event.createdAt.toISOString() +
    '\r\nce-subject: ' +
    aggregateId +
    '\r\nce-datacontenttype: ' +
    encodeRepeated(event.contentType) +
    '\r\nce-aggregatetype: ' +
    encodeRepeated(event.aggregateType) +
    '\r\nce-aggregateid: ' +
    aggregateId +
    '\r\nce-sequence: ' +
    (sequence.length >= SEQUENCE_DIGITS ? sequence : sequence.padStart(SEQUENCE_DIGITS, '0')) +
    '\r\nce-aggregatesequence: ' +
    sequence;
  if (event.sequenceBase > 0) text += `\r\nce-sequencebase: ${event.sequenceBase}`;
  text += `\r\nce-schemaversion: ${event.schemaVersion}\r\nNats-Msg-Id: ${event.eventId}\r\nNats-Expected-Stream: ${stream}\r\n\r\n`;
  return Buffer.from(text);
}

/**
 * The PubAcks of one batch at a time on ONE wildcard subscription `<inbox>.*`: the reply token of
 * a batch's message `index` is `base + index` in base 36, and an ack table indexed by it counts
 * each reply once. Tokens grow across batches, so a late reply to an earlier batch is ignored.
 */
class PubAckBatches {
  readonly #replyPrefix: string;
  #acked = new Uint8Array(1024);
  /** Token of the current batch's first message. */
  #base = 0;
  /** Messages of the current batch whose replies count; 0 between batches. */
  #count = 0;
  #settled = 0;
  #failures = 0;
  #finish: (() => void) | undefined;

  constructor(nc: NatsConnection) {
    const inbox = createInbox();
    this.#replyPrefix = `${inbox}.`;
    const from = this.#replyPrefix.length;
    nc.subscribe(`${inbox}.*`, {
      callback: (_error: Error | null, msg: Msg) => {
        const index = replyToken(msg.subject, from) - this.#base;
        if (index < 0 || index >= this.#count || this.#acked[index] !== 0) return;
        this.#acked[index] = 1;
        if (!isPubAck(msg.data)) this.#failures += 1;
        this.#settled += 1;
        if (this.#settled === this.#count) this.#finish?.();
      },
    });
  }

  /** The reply subject of the current batch's message `index`. */
  reply(index: number): string {
    return this.#replyPrefix + (this.#base + index).toString(36);
  }

  /**
   * Awaits the replies to the current batch's first `count` messages, which `send` sends (or
   * finishes sending); resolves with how many JetStream refused, rejects after `timeoutMs`
   * without every PubAck. The next batch's tokens start after these.
   */
  async settle(count: number, timeoutMs: number, send: () => void): Promise<number> {
    if (this.#acked.length < count) this.#acked = new Uint8Array(count);
    else this.#acked.fill(0, 0, count);
    this.#count = count;
    this.#settled = 0;
    this.#failures = 0;
    const done = new Promise<void>((resolve) => {
      this.#finish = resolve;
    });
    send();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`lean publish: ${count - this.#settled} of ${count} PubAcks missing`)),
        timeoutMs,
      );
    });
    try {
      await Promise.race([done, timeout]);
    } finally {
      clearTimeout(timer);
      this.#finish = undefined;
      this.#base += count;
      this.#count = 0;
    }
    return this.#failures;
  }
}

/**
 * One NATS connection's lean publisher: `publish(events)` sends the batch and resolves with the
 * number of publishes JetStream refused once every PubAck is in. One batch at a time.
 */
export class LeanJetStream {
  readonly #nc: NatsConnection;
  readonly #stream: string;
  readonly #source: string;
  readonly #headers = new RawHeaders();
  readonly #options: PublishOptions;
  readonly #acks: PubAckBatches;

  private constructor(nc: NatsConnection, stream: string, source: string) {
    this.#nc = nc;
    this.#stream = stream;
    this.#source = source;
    this.#options = { headers: this.#headers, reply: '' };
    this.#acks = new PubAckBatches(nc);
  }

  static async open(nc: NatsConnection, stream: string, source = 'tx-outbox'): Promise<LeanJetStream> {
    const lean = new LeanJetStream(nc, stream, source);
    await nc.flush();
    return lean;
  }

  /**
   * Publishes `events`; resolves with how many JetStream refused, rejects after `timeoutMs` without
   * every PubAck. `headerBlock` builds each message's header block (default: natsPublisher's).
   */
  async publish(
    events: readonly LeanEvent[],
    timeoutMs = 30_000,
    headerBlock: (event: LeanEvent) => Uint8Array = (event) =>
      leanHeaderBlock(event, this.#source, this.#stream),
  ): Promise<number> {
    const count = events.length;
    if (count === 0) return 0;
    return this.#acks.settle(count, timeoutMs, () => {
      for (let i = 0; i < count; i += 1) {
        const event = events[i]!;
        this.#headers.bytes = headerBlock(event);
        this.#options.reply = this.#acks.reply(i);
        this.#nc.publish(event.subject, event.payload, this.#options);
      }
    });
  }
}

/** The client's protocol handler, reached to write a batch as one command (nats.js 3: `nc.protocol`). */
interface Protocol {
  sendCommand(cmd: Uint8Array): void;
  flushPending(): void;
}

function protocolOf(nc: NatsConnection): Protocol {
  const protocol = (nc as unknown as { protocol?: Partial<Protocol> }).protocol;
  if (typeof protocol?.sendCommand !== 'function' || typeof protocol.flushPending !== 'function') {
    throw new Error('lean publish: this NATS client has no protocol.sendCommand (nats.js 3 expected)');
  }
  return protocol as Protocol;
}

/** What the lean relay sends as headers: `Nats-Msg-Id` only, or what tx-outbox's NATS publisher sends. */
export type LeanHeaders = 'msg-id' | 'same';

/** The `NATS/1.0` header block carrying `Nats-Msg-Id` only, as ASCII text. */
export function msgIdHeader(eventId: string): string {
  return `NATS/1.0\r\nNats-Msg-Id: ${eventId}\r\n\r\n`;
}

/**
 * The lean reference relay's publisher (lean-relay-process.ts), leaner than LeanJetStream: a
 * batch is written into ONE buffer (reused from batch to batch) and handed to the client's
 * connection in 64 KB pieces as they fill (a socket write each: the server stores the first
 * messages while the last are being written), with no per-message protocol string, header
 * object or payload copy of the client's own; the PubAcks are read as LeanJetStream reads them.
 * A batch: `add()` each message, then `send()` in the same tick (replies count from `send` on), which resolves with the number of publishes
 * JetStream refused once every PubAck is in. One batch at a time; subjects are not checked (the
 * relay's rows are the bench's own).
 */
export class LeanBatchPublisher {
  readonly #protocol: Protocol;
  readonly #acks: PubAckBatches;
  /** The batch being written, as protocol bytes; reused (a batch is sent whole before the next). */
  #out = Buffer.allocUnsafe(1 << 20);
  #length = 0;
  /** Bytes of #out already handed to the connection. */
  #sent = 0;
  readonly #flushBytes: number;
  /** Messages added to the current batch. */
  #count = 0;

  private constructor(nc: NatsConnection, flushBytes: number) {
    this.#protocol = protocolOf(nc);
    this.#flushBytes = flushBytes;
    this.#acks = new PubAckBatches(nc);
  }

  /**
   * `flushBytes`: while a batch is being added, every time this many bytes are written they go
   * to the socket, so the server stores the first messages while the last are being encoded
   * (Infinity: the batch in one write).
   */
  static async open(nc: NatsConnection, flushBytes = 64 * 1024): Promise<LeanBatchPublisher> {
    const lean = new LeanBatchPublisher(nc, flushBytes);
    await nc.flush();
    return lean;
  }

  /**
   * Adds one message to the batch: `header`, a whole header block (`NATS/1.0\r\n…\r\n\r\n`), as
   * ASCII text or bytes; `payload` as text (written UTF-8) or bytes.
   */
  add(subject: string, header: string | Uint8Array, payload: string | Uint8Array): void {
    const reply = this.#acks.reply(this.#count);
    this.#count += 1;
    const headerBytes = header.length; // ASCII text: one byte a character
    const payloadBytes = typeof payload === 'string' ? Buffer.byteLength(payload) : payload.length;
    const line = `HPUB ${subject} ${reply} ${headerBytes} ${headerBytes + payloadBytes}\r\n`;
    this.#reserve(line.length * 3 + headerBytes + payloadBytes + 2);
    const out = this.#out;
    let at = this.#length;
    at += out.write(line, at, 'utf8');
    if (typeof header === 'string') at += out.write(header, at, 'latin1');
    else {
      out.set(header, at);
      at += headerBytes;
    }
    if (typeof payload === 'string') at += out.write(payload, at, 'utf8');
    else {
      out.set(payload, at);
      at += payloadBytes;
    }
    out[at] = 13;
    out[at + 1] = 10;
    this.#length = at + 2;
    if (this.#length - this.#sent >= this.#flushBytes) this.#flush();
  }

  /** Hands the bytes written since the last flush to the connection, which writes them now. */
  #flush(): void {
    this.#protocol.sendCommand(this.#out.subarray(this.#sent, this.#length));
    this.#protocol.flushPending();
    this.#sent = this.#length;
  }

  /** Sends the batch added so far; resolves with how many JetStream refused, rejects after `timeoutMs` without every PubAck. */
  async send(timeoutMs = 30_000): Promise<number> {
    const count = this.#count;
    if (count === 0) return 0;
    try {
      return await this.#acks.settle(count, timeoutMs, () => {
        if (this.#length > this.#sent) this.#flush();
      });
    } finally {
      this.#count = 0;
      this.#length = 0;
      this.#sent = 0;
    }
  }

  #reserve(bytes: number): void {
    if (this.#length + bytes <= this.#out.length) return;
    // The bytes already sent stay in the old buffer (the socket may still hold them).
    const bigger = Buffer.allocUnsafe(Math.max(this.#out.length * 2, this.#length + bytes));
    this.#out.copy(bigger, 0, 0, this.#length);
    this.#out = bigger;
  }
}
