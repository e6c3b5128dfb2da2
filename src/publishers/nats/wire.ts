/**
 * What a NATS JetStream publish carries, the same in both modes: the subject (and NATS's rules
 * for it), the envelope headers with `Nats-Msg-Id` and the expected stream, the payload bytes.
 * The envelope follows the CloudEvents NATS binding in binary mode (1.0.3: §3.1.1 the payload
 * is the body, §3.1.3.1 `ce-<name>` headers, `ce-datacontenttype` included, §3.1.3.2 values
 * percent-encoded), so any attribute value arrives byte for byte.
 */
import { type MsgHdrs, headers as natsHeaders } from '@nats-io/transport-node';
import {
  ATTRIBUTE_NAMES,
  OPTIONAL_ATTRIBUTE_NAMES,
  SEQUENCE_DIGITS,
  SPEC_VERSION,
} from '../../envelope/attributes.js';
import { attributeHeader, envelopeHeaders } from '../../envelope/bindings.js';
import { percentEncode } from '../../envelope/percent.js';
import { errorMessage } from '../../errors.js';
import type { OutboxMessage, PublishOutcome } from '../contract.js';
import { defaultDestination } from '../core/destination.js';
import { permanent } from '../core/outcomes.js';

export const MSG_ID_HEADER = 'Nats-Msg-Id';
export const EXPECTED_STREAM_HEADER = 'Nats-Expected-Stream';

/** `message.topic`, else `${aggregateType}.${type}`. */
export const defaultSubject: (message: OutboxMessage) => string = defaultDestination;

/** A message ready for the pipeline: its header block encoded by {@link encodeHeaders}. */
export interface PipelineItem {
  readonly subject: string;
  readonly payload: Uint8Array;
  readonly headers: Uint8Array;
}

/** A message ready for `js.publish()`: the envelope headers (the client adds `Nats-Msg-Id` and the expected stream). */
export interface ClientItem {
  readonly subject: string;
  readonly payload: Uint8Array;
  readonly eventId: string;
  readonly headers: MsgHdrs;
}

/** A message whose subject and headers were built without errors, for one mode or the other. */
export type Prepared = PipelineItem | ClientItem;

/** What {@link prepareMessage} needs of the options. */
export interface PrepareRule {
  readonly destination: (message: OutboxMessage) => string;
  readonly source: string;
  readonly stream: string | undefined;
  readonly pipelined: boolean;
}

/** Builds subject and headers; a message NATS would refuse gets its permanent outcome here. */
export function prepareMessage(message: OutboxMessage, rule: PrepareRule): Prepared | PublishOutcome {
  let subject: string;
  try {
    subject = rule.destination(message);
  } catch (error) {
    return permanent(
      `The subject function threw for event ${message.eventId}: ${errorMessage(error)}`,
      error,
    );
  }
  const problem = subjectProblem(subject);
  if (problem !== undefined) {
    return permanent(`NATS rejects subject "${subject}" (event ${message.eventId}): it ${problem}`);
  }
  const { eventId, payload } = message;
  try {
    if (rule.pipelined) return { subject, payload, headers: headerBlocksOf(rule).encode(message) };
    return {
      subject,
      payload,
      eventId,
      headers: buildHeaders(envelopeHeaders(message, rule.source, 'nats')),
    };
  } catch (error) {
    return permanent(`Invalid header for subject "${subject}": ${errorMessage(error)}`, error);
  }
}

/** Subjects already found fine: a relay publishes on few subjects, over and over. */
const validSubjects = new Set<string>();

/** Why NATS would refuse to publish on `subject`, or undefined when it is fine. */
export function subjectProblem(subject: string): string | undefined {
  if (validSubjects.has(subject)) return undefined;
  const problem = findSubjectProblem(subject);
  if (problem === undefined) {
    if (validSubjects.size >= 4096) validSubjects.clear();
    validSubjects.add(subject);
  }
  return problem;
}

function findSubjectProblem(subject: string): string | undefined {
  if (subject.length === 0) return 'is empty';
  if (/\s/.test(subject)) return 'contains whitespace';
  const tokens = subject.split('.');
  if (tokens.some((token) => token.length === 0))
    return 'has an empty token (leading, trailing or double dot)';
  if (tokens.some((token) => token === '*' || token === '>')) return 'contains a wildcard token (* or >)';
  return undefined;
}

/** Why a payload can never fit the server's `max_payload`, or undefined. */
export function payloadProblem(
  payloadBytes: number,
  subject: string,
  maxPayload: number | undefined,
): PublishOutcome | undefined {
  if (maxPayload === undefined || payloadBytes <= maxPayload) return undefined;
  return permanent(
    `Payload of ${payloadBytes} bytes for subject "${subject}" exceeds the server's ` +
      `max_payload of ${maxPayload} bytes`,
  );
}

/**
 * Client-side headers for `js.publish` (the client adds `Nats-Msg-Id` and the expected stream).
 * Throws, as {@link encodeHeaders} does, on a value the client would trim.
 */
export function buildHeaders(values: Readonly<Record<string, string>>): MsgHdrs {
  const headers = natsHeaders();
  for (const name in values) headers.set(name, checkedValue(name, values[name]!));
  return headers;
}

/** Header names already checked; names repeat (ce-*, user headers), so the check runs once each. */
const validNames = new Set<string>();

/**
 * The encoded NATS header block (`NATS/1.0\r\nName: value\r\n…\r\n\r\n`) of a JetStream publish:
 * `values` (the envelope), then `Nats-Msg-Id` and, with `stream`, `Nats-Expected-Stream`, in the
 * same order and with the same validation as the client's `MsgHdrs` would give. Built as text
 * and encoded once: the client's header object costs several scans per header on the hot path.
 * Throws on a header name or value NATS cannot carry.
 */
export function encodeHeaders(
  values: Readonly<Record<string, string>>,
  msgId: string,
  stream: string | undefined,
): Uint8Array {
  let text = 'NATS/1.0';
  for (const name in values) {
    if (name === MSG_ID_HEADER || name === EXPECTED_STREAM_HEADER) continue; // ours win, as with js.publish
    text += `\r\n${checkedName(name)}: ${checkedValue(name, values[name]!)}`;
  }
  text += `\r\n${MSG_ID_HEADER}: ${checkedValue(MSG_ID_HEADER, msgId)}`;
  if (stream !== undefined)
    text += `\r\n${EXPECTED_STREAM_HEADER}: ${checkedValue(EXPECTED_STREAM_HEADER, stream)}`;
  // Buffer.from takes small strings from a shared pool: cheaper than a TextEncoder buffer each.
  return Buffer.from(`${text}\r\n\r\n`);
}

/** The header names the fast path leaves to the generic one: ours, the envelope's, and `__proto__`. */
const GENERIC_NAMES: ReadonlySet<string> = new Set([
  MSG_ID_HEADER,
  EXPECTED_STREAM_HEADER,
  '__proto__', // dropped by envelopeHeaders' plain-object copy
  ...[...ATTRIBUTE_NAMES, ...OPTIONAL_ATTRIBUTE_NAMES].map((name) => attributeHeader('nats', name)),
]);

/** Bytes of each slab the header blocks are written into. */
const SLAB_BYTES = 64 * 1024;

/** Most distinct values kept percent-encoded per publisher (types, aggregate types, content types). */
const MAX_REPEATED = 1024;

/**
 * One publisher's NATS header blocks, byte for byte what {@link encodeHeaders} makes of
 * `envelopeHeaders(message, source, 'nats')`, `Nats-Msg-Id` and the expected stream, written in
 * one pass: the constant parts (the source, the expected stream) encoded once, the values that
 * repeat from event to event (type, aggregate type, content type) percent-encoded once each, and
 * no header object in between. A message with a header named like one of the envelope's (its value
 * replaced in place), like ours (dropped) or `__proto__` goes the generic way, as does any message
 * the fast path finds fault with, so a refusal says exactly what the generic path says.
 */
export class HeaderBlocks {
  readonly #source: string;
  readonly #stream: string | undefined;
  /** `\r\nce-source: <source>\r\nce-type: `, or undefined when the source cannot be encoded. */
  readonly #sourceLine: string | undefined;
  /** `[\r\nNats-Expected-Stream: <stream>]\r\n\r\n`, or undefined when the stream is no header value. */
  readonly #tail: string | undefined;
  readonly #repeated = new Map<string, string>();
  #slab: Buffer = Buffer.allocUnsafeSlow(0);
  #used = 0;

  constructor(source: string, stream: string | undefined) {
    this.#source = source;
    this.#stream = stream;
    this.#sourceLine = attempt(() => `\r\nce-source: ${percentEncode(source)}\r\nce-type: `);
    this.#tail = attempt(() =>
      stream === undefined
        ? '\r\n\r\n'
        : `\r\n${EXPECTED_STREAM_HEADER}: ${checkedValue(EXPECTED_STREAM_HEADER, stream)}\r\n\r\n`,
    );
  }

  /** The header block of `message`; throws, as the generic path does, on a header NATS cannot carry. */
  encode(message: OutboxMessage): Uint8Array {
    const sourceLine = this.#sourceLine;
    const tail = this.#tail;
    if (sourceLine === undefined || tail === undefined) return this.#generic(message);
    let text = 'NATS/1.0';
    const own = message.headers;
    try {
      for (const name in own) {
        if (GENERIC_NAMES.has(name)) return this.#generic(message);
        text += `\r\n${checkedName(name)}: ${checkedValue(name, own[name]!)}`;
      }
      const eventId = message.eventId;
      const sequence = String(message.sequence);
      const aggregateId = percentEncode(message.aggregateId);
      const base = message.sequenceBase ?? 0;
      // The attributes as writeAttributes writes them (attributes.ts: order, values) under the
      // nats binding's names, then ours; the unit test holds the two paths byte for byte equal.
      text +=
        `\r\nce-specversion: ${SPEC_VERSION}\r\nce-id: ${percentEncode(eventId)}${sourceLine}` +
        `${this.#encoded(message.type)}\r\nce-time: ${message.createdAt.toISOString()}` +
        `\r\nce-subject: ${aggregateId}\r\nce-datacontenttype: ${this.#encoded(message.contentType)}` +
        `\r\nce-aggregatetype: ${this.#encoded(message.aggregateType)}\r\nce-aggregateid: ${aggregateId}` +
        `\r\nce-sequence: ${sequence.length >= SEQUENCE_DIGITS ? sequence : sequence.padStart(SEQUENCE_DIGITS, '0')}` +
        `\r\nce-aggregatesequence: ${sequence}` +
        (base > 0 ? `\r\nce-sequencebase: ${String(base)}` : '') +
        `\r\nce-schemaversion: ${String(message.schemaVersion)}` +
        `\r\n${MSG_ID_HEADER}: ${checkedValue(MSG_ID_HEADER, eventId)}${tail}`;
    } catch {
      return this.#generic(message); // its error, word for word
    }
    return this.#bytes(text);
  }

  /**
   * `text` as UTF-8 in the current slab (a new one when it might not fit): a view each, one
   * ArrayBuffer per ~130 blocks instead of one per ~17 from Buffer's shared 8 KiB pool. A slab
   * lives as long as a view of it: the client copies every block at its next flush.
   */
  #bytes(text: string): Uint8Array {
    const room = text.length * 3; // UTF-8 bytes of a UTF-16 code unit: at most 3
    if (this.#used + room > this.#slab.length) {
      this.#slab = Buffer.allocUnsafeSlow(Math.max(SLAB_BYTES, room));
      this.#used = 0;
    }
    const from = this.#used;
    this.#used += this.#slab.write(text, from, 'utf8');
    return this.#slab.subarray(from, this.#used);
  }

  /** `value` percent-encoded, from the cache when it was seen before. */
  #encoded(value: string): string {
    let encoded = this.#repeated.get(value);
    if (encoded === undefined) {
      encoded = percentEncode(value);
      if (this.#repeated.size >= MAX_REPEATED) this.#repeated.clear();
      this.#repeated.set(value, encoded);
    }
    return encoded;
  }

  #generic(message: OutboxMessage): Uint8Array {
    return encodeHeaders(envelopeHeaders(message, this.#source, 'nats'), message.eventId, this.#stream);
  }
}

function attempt(make: () => string): string | undefined {
  try {
    return make();
  } catch {
    return undefined;
  }
}

/** The header blocks of each rule (a publisher's resolved options: one per publisher). */
const blocksOfRule = new WeakMap<PrepareRule, HeaderBlocks>();

function headerBlocksOf(rule: PrepareRule): HeaderBlocks {
  let blocks = blocksOfRule.get(rule);
  if (blocks === undefined) {
    blocks = new HeaderBlocks(rule.source, rule.stream);
    blocksOfRule.set(rule, blocks);
  }
  return blocks;
}

/** The client's rule (RFC 822 field name): printable ASCII, no colon. */
function checkedName(name: string): string {
  if (validNames.has(name)) return name;
  if (name.length === 0) throw new Error('a header name cannot be empty');
  for (let i = 0; i < name.length; i += 1) {
    const c = name.charCodeAt(i);
    if (c === 58 || c < 33 || c > 126) {
      throw new Error(`'${name[i]}' is not a valid character in a header name`);
    }
  }
  if (validNames.size >= 1024) validNames.clear();
  validNames.add(name);
  return name;
}

/**
 * `value`, which NATS carries unchanged: no CR or LF (they end a header line), and no
 * whitespace at either end. nats.js trims a value when it sets a header and again when it reads
 * one (`String.prototype.trim`, so NBSP and BOM too), and tx-outbox 0.1 trimmed it silently
 * here: a value that would change is refused instead. Envelope values never are (they are
 * percent-encoded: visible ASCII); a user header may be, when it did not come through `enqueue`.
 * The value itself is never quoted (it may be a secret).
 */
function checkedValue(name: string, value: string): string {
  if (value.includes('\n') || value.includes('\r')) {
    throw new Error(`header ${name}: values cannot contain \\r or \\n`);
  }
  // Visible ASCII at both ends (the usual case): nothing a reader trims.
  const first = value.charCodeAt(0);
  const last = value.charCodeAt(value.length - 1);
  if (first > 32 && first < 127 && last > 32 && last < 127) return value;
  if (value.trim().length !== value.length) {
    throw new Error(
      `header ${name}: its value starts or ends with whitespace, which NATS clients trim ` +
        '(it would arrive altered); remove it, or percent-encode the value',
    );
  }
  return value;
}
