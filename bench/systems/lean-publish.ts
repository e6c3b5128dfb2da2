/**
 * The lean JetStream publish technique of the broker ceiling's `raw` loop (broker-ceiling.ts),
 * as a piece a relay can drive batch by batch: core NATS publishes with a reply subject each,
 * ONE wildcard subscription for every PubAck, an ack table indexed by the reply token, no
 * promise or timer per message. The header block is the CloudEvents NATS binding as
 * natsPublisher writes it (envelopeHeaders(m, source, 'nats') + Nats-Msg-Id + the expected
 * stream), built as one string per message, so the server does the same work for each.
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
 * One NATS connection's lean publisher: `publish(events)` sends the batch and resolves with the
 * number of publishes JetStream refused once every PubAck is in. One batch at a time.
 */
export class LeanJetStream {
  readonly #nc: NatsConnection;
  readonly #stream: string;
  readonly #source: string;
  readonly #replyPrefix: string;
  readonly #headers = new RawHeaders();
  readonly #options: PublishOptions;
  #acked = new Uint8Array(1024);
  /** Token of the current batch's first message; tokens grow across batches (stale replies are ignored). */
  #base = 0;
  #count = 0;
  #settled = 0;
  #failures = 0;
  #finish: (() => void) | undefined;

  private constructor(nc: NatsConnection, stream: string, source: string) {
    this.#nc = nc;
    this.#stream = stream;
    this.#source = source;
    const inbox = createInbox();
    this.#replyPrefix = `${inbox}.`;
    this.#options = { headers: this.#headers, reply: '' };
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
    if (this.#acked.length < count) this.#acked = new Uint8Array(count);
    else this.#acked.fill(0, 0, count);
    this.#base += this.#count;
    this.#count = count;
    this.#settled = 0;
    this.#failures = 0;
    const done = new Promise<void>((resolve) => {
      this.#finish = resolve;
    });
    const base = this.#base;
    for (let i = 0; i < count; i += 1) {
      const event = events[i]!;
      this.#headers.bytes = headerBlock(event);
      this.#options.reply = this.#replyPrefix + (base + i).toString(36);
      this.#nc.publish(event.subject, event.payload, this.#options);
    }
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
    }
    return this.#failures;
  }
}
