/**
 * What a NATS JetStream publish carries, the same in both modes: the subject (and NATS's rules
 * for it), the envelope headers with `Nats-Msg-Id` and the expected stream, the payload bytes.
 * The envelope follows the CloudEvents NATS binding in binary mode (1.0.3: §3.1.1 the payload
 * is the body, §3.1.3.1 `ce-<name>` headers, `ce-datacontenttype` included, §3.1.3.2 values
 * percent-encoded), so any attribute value arrives byte for byte.
 */
import { type MsgHdrs, headers as natsHeaders } from '@nats-io/transport-node';
import { envelopeHeaders } from '../../envelope/bindings.js';
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
    const envelope = envelopeHeaders(message, rule.source, 'nats');
    return rule.pipelined
      ? { subject, payload, headers: encodeHeaders(envelope, eventId, rule.stream) }
      : { subject, payload, eventId, headers: buildHeaders(envelope) };
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
