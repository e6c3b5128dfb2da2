/**
 * The CloudEvents attributes of an outbox message, the same on every transport; the bindings
 * (bindings.ts) only name and encode them. `sequence` is the Sequence extension (a String that
 * orders as a string: zero-padded to 19 digits, enough for any sequence), `aggregatesequence`
 * the same position as a plain decimal integer for consumers that want the number. Both count
 * within one aggregate (`aggregatetype`, `aggregateid`) of one `source`. `sequencebase`, sent
 * only when above 0, is where the aggregate's sequences started (its first event is
 * `sequencebase + 1`): above 0 for an aggregate created after the pruner ran.
 */
import type { OutboxMessage } from '../core/message.js';

export const SPEC_VERSION = '1.0';

/** Digits of the zero-padded `sequence`: every non-negative bigint fits. */
export const SEQUENCE_DIGITS = 19;

/** The attributes tx-outbox writes, in the order it writes them. */
export const ATTRIBUTE_NAMES = [
  'specversion',
  'id',
  'source',
  'type',
  'time',
  'subject',
  'datacontenttype',
  'aggregatetype',
  'aggregateid',
  'sequence',
  'aggregatesequence',
  'schemaversion',
] as const;

/** Attributes tx-outbox writes only when they say something: `sequencebase` only above 0. */
export const OPTIONAL_ATTRIBUTE_NAMES = ['sequencebase'] as const;

export type OptionalAttributeName = (typeof OPTIONAL_ATTRIBUTE_NAMES)[number];

export type AttributeName = (typeof ATTRIBUTE_NAMES)[number] | OptionalAttributeName;

/** One message's attributes, every value a CloudEvents String. */
export type EnvelopeAttributes = Readonly<Record<Exclude<AttributeName, OptionalAttributeName>, string>> & {
  readonly [K in OptionalAttributeName]?: string;
};

/**
 * Every attribute name a reader recognises without a prefix (MQTT 5 user properties, Redis
 * fields): what tx-outbox writes, plus the other attributes of the core specification.
 */
export const KNOWN_ATTRIBUTES: ReadonlySet<string> = new Set<string>([
  ...ATTRIBUTE_NAMES,
  ...OPTIONAL_ATTRIBUTE_NAMES,
  'dataschema',
]);

/** What a CloudEvents attribute may be named. */
export const ATTRIBUTE_NAME = /^[a-z0-9]+$/;

/**
 * The extension that carries, in structured mode, the message's own headers whose names are not
 * attribute names: a JSON object of name → value.
 */
export const HEADERS_ATTRIBUTE = 'txoheaders';

/** `sequence` as the Sequence extension wants it: zero-padded, so string order is number order. */
export function paddedSequence(sequence: number | bigint): string {
  return String(sequence).padStart(SEQUENCE_DIGITS, '0');
}

/** The header (field, user property …) name of each attribute under one binding. */
export type AttributeNames = Readonly<Record<AttributeName, string>>;

const UNPREFIXED = Object.fromEntries(
  [...ATTRIBUTE_NAMES, ...OPTIONAL_ATTRIBUTE_NAMES].map((name) => [name, name]),
) as AttributeNames;

const same = (value: string): string => value;

/**
 * Writes the attributes of `message`, published from `source`, into `target` under `names`, each
 * string value through `encode`, `datacontenttype` only `withContentType`: the one place that says
 * what each attribute holds, in the order they are written.
 */
export function writeAttributes(
  target: Record<string, string>,
  names: AttributeNames,
  message: OutboxMessage,
  source: string,
  encode: (value: string) => string = same,
  withContentType = true,
): void {
  const sequence = String(message.sequence);
  const aggregateId = encode(message.aggregateId);
  target[names.specversion] = SPEC_VERSION;
  target[names.id] = encode(message.eventId);
  target[names.source] = encode(source);
  target[names.type] = encode(message.type);
  target[names.time] = message.createdAt.toISOString(); // RFC 3339: visible ASCII, nothing to encode
  target[names.subject] = aggregateId;
  if (withContentType) target[names.datacontenttype] = encode(message.contentType);
  target[names.aggregatetype] = encode(message.aggregateType);
  target[names.aggregateid] = aggregateId;
  target[names.sequence] =
    sequence.length >= SEQUENCE_DIGITS ? sequence : sequence.padStart(SEQUENCE_DIGITS, '0');
  target[names.aggregatesequence] = sequence;
  // Where the aggregate's sequences start again after its producer-side row was pruned
  // (docs/schema.md, Bounded tables): its first event is sequencebase + 1. Absent: 0.
  const base = message.sequenceBase ?? 0;
  if (base > 0) target[names.sequencebase] = String(base);
  target[names.schemaversion] = String(message.schemaVersion);
}

/** The attributes of `message`, published from `source`. */
export function envelopeAttributes(message: OutboxMessage, source: string): EnvelopeAttributes {
  const attributes: Record<string, string> = {};
  writeAttributes(attributes, UNPREFIXED, message, source);
  return attributes as EnvelopeAttributes;
}
