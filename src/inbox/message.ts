import { readEnvelope } from '../envelope/read.js';
import { OutboxValidationError } from '../errors.js';
import { MAX_SCHEMA_VERSION } from '../producer/event.js';
import { MAX_NAME_BYTES } from '../producer/names.js';
import { uncarriedProblem, unstorableProblem } from '../producer/text.js';

/** An event as a consumer receives it: the envelope plus the payload bytes. */
export interface InboxMessage {
  readonly eventId: string;
  readonly type: string;
  readonly aggregateType: string;
  readonly aggregateId: string;
  readonly sequence: number;
  /**
   * Where the aggregate's sequences start (the `sequencebase` attribute): its first event is
   * `sequenceBase + 1`. 0 (or absent) unless the aggregate was created after the outbox's pruner
   * ran (docs/schema.md, Bounded tables); `strict` ordering expects `max(last, sequenceBase) + 1`.
   */
  readonly sequenceBase?: number;
  readonly schemaVersion: number;
  /** The payload's content type (CloudEvents `datacontenttype`). Absent: `application/json`. */
  readonly contentType?: string;
  readonly payload: Uint8Array;
  /**
   * The message's own headers (`traceparent`, the producer's headers …) and every CloudEvents
   * attribute under its `ce-` name (`ce-time`, `ce-source` …), decoded, whichever transport
   * binding carried them (`aggregatesequence` is `sequence` here). `fromEnvelope` of these
   * headers gives the same message again.
   */
  readonly headers: Readonly<Record<string, string>>;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const DIGITS = /^[0-9]+$/;

/**
 * Reads the envelope of a message published by tx-outbox into an InboxMessage: the CloudEvents
 * attributes as any transport's binding carries them (`ce-*` headers with percent-encoded
 * values on HTTP and NATS, `ce_*` Kafka headers, `cloudEvents:*` AMQP properties, unprefixed
 * MQTT 5 user properties and Redis fields) and as earlier versions wrote them (`ce-*` on every
 * transport). Pass the content-type header or property along when the transport has one
 * (HTTP, Kafka, AMQP, MQTT 5). A message without an envelope cannot be deduplicated or
 * ordered: the error names the missing header. The schema version is required too (an integer
 * from 1 to 2147483647): a message without one, or with another value, is refused rather than
 * read as some version the consumer's `accepts` might let through.
 */
export function fromEnvelope(
  headers: Readonly<Record<string, string | undefined>>,
  payload: Uint8Array,
): InboxMessage {
  const envelope = readEnvelope(headers);
  const { attributes, headerOf } = envelope;
  const field = (attribute: string): string =>
    `headers.${headerOf[attribute] ?? envelope.prefix + attribute}`;
  const get = (attribute: string): string => {
    const value = attributes[attribute];
    if (value === undefined || value === '') {
      throw new OutboxValidationError(
        field(attribute),
        'is missing',
        'The message was not published by tx-outbox (or its envelope was stripped on the way).',
      );
    }
    return value;
  };
  checkStorable(attributes, headerOf);
  for (const attribute of ['type', 'aggregatetype', 'aggregateid'] as const) {
    const value = attributes[attribute];
    if (value === undefined) continue;
    const problem =
      uncarriedProblem(value) ??
      (Buffer.byteLength(value) > MAX_NAME_BYTES
        ? `is longer than ${MAX_NAME_BYTES} bytes in UTF-8`
        : undefined);
    if (problem !== undefined) {
      throw new OutboxValidationError(field(attribute), `${problem}, which tx-outbox never sends`, NOT_OURS);
    }
  }
  const eventId = get('id');
  if (!UUID.test(eventId)) {
    throw new OutboxValidationError(
      field('id'),
      `"${eventId.slice(0, 100)}" is not a UUID`,
      'Pass event ids.',
    );
  }
  const sequence = sequenceOf(attributes, field);
  const sequenceBase = sequenceBaseOf(attributes, sequence, field);
  const schemaVersion = schemaVersionOf(attributes, field);
  // Other tools' binary headers (Spring Kafka's dead-letter offsets …) may hold a NUL, which the
  // inbox could not store with a quarantined message: they are left out, the message is kept.
  const canonical: Record<string, string> = { ...envelope.headers };
  for (const name of Object.keys(canonical)) {
    if (unstorableProblem(canonical[name]!) !== undefined) delete canonical[name];
  }
  // The 0.1 form (`ce-` names, values as they are, no `ce-aggregatesequence`): read again, it
  // gives the same message instead of percent-decoding the values a second time.
  for (const attribute in attributes) {
    if (attribute !== 'aggregatesequence') canonical[`ce-${attribute}`] = attributes[attribute]!;
  }
  return {
    eventId: eventId.toLowerCase(),
    type: get('type'),
    aggregateType: get('aggregatetype'),
    aggregateId: get('aggregateid'),
    sequence,
    ...(sequenceBase > 0 ? { sequenceBase } : {}),
    schemaVersion,
    contentType: attributes['datacontenttype'] ?? 'application/json',
    payload,
    headers: canonical,
  };
}

const NOT_OURS = 'The message was not published by tx-outbox, or was altered on the way.';

/** Refuses a value the inbox could not store (a NUL: PostgreSQL text and jsonb refuse it). */
function checkStorable(
  values: Readonly<Record<string, string>>,
  headerOf?: Readonly<Record<string, string>>,
): void {
  for (const name in values) {
    const problem = unstorableProblem(values[name]!);
    if (problem !== undefined) {
      throw new OutboxValidationError(`headers.${headerOf?.[name] ?? name}`, problem, NOT_OURS);
    }
  }
}

/** The aggregate sequence: `aggregatesequence`, else the (zero-padded or, from earlier versions, plain) `sequence`. */
function sequenceOf(
  attributes: Readonly<Record<string, string>>,
  field: (attribute: string) => string,
): number {
  const plain = attributes['aggregatesequence'];
  const padded = attributes['sequence'];
  const attribute = plain !== undefined ? 'aggregatesequence' : 'sequence';
  const text = plain ?? padded;
  if (text === undefined || text === '') {
    throw new OutboxValidationError(
      field('sequence'),
      'is missing',
      'The message was not published by tx-outbox (or its envelope was stripped on the way).',
    );
  }
  const sequence = DIGITS.test(text) ? Number(text) : Number.NaN;
  if (!Number.isSafeInteger(sequence) || sequence < 1) {
    throw new OutboxValidationError(field(attribute), 'is not a positive integer', 'Check the publisher.');
  }
  if (plain !== undefined && padded !== undefined && (!DIGITS.test(padded) || Number(padded) !== sequence)) {
    throw new OutboxValidationError(
      field('sequence'),
      `is ${JSON.stringify(padded.slice(0, 40))}, not aggregatesequence ${plain}`,
      'Check the publisher.',
    );
  }
  return sequence;
}

/** The sequence base: `sequencebase` (absent: 0), below the sequence. */
function sequenceBaseOf(
  attributes: Readonly<Record<string, string>>,
  sequence: number,
  field: (attribute: string) => string,
): number {
  const text = attributes['sequencebase'];
  if (text === undefined) return 0;
  const base = DIGITS.test(text) ? Number(text) : Number.NaN;
  if (!Number.isSafeInteger(base) || base >= sequence) {
    throw new OutboxValidationError(
      field('sequencebase'),
      `is ${JSON.stringify(text.slice(0, 40))}, not a non-negative integer below the sequence ${sequence}`,
      'Check the publisher.',
    );
  }
  return base;
}

/**
 * The schema version: `schemaversion`, a decimal integer from 1 to {@link MAX_SCHEMA_VERSION}
 * (what `enqueue` accepts). Every message tx-outbox ever published carries it, so a message
 * without one is refused like one without its sequence; a value that is not a version is
 * refused too, never read as some version: the inbox's `accepts` gate decides on it.
 */
function schemaVersionOf(
  attributes: Readonly<Record<string, string>>,
  field: (attribute: string) => string,
): number {
  const text = attributes['schemaversion'];
  if (text === undefined || text === '') {
    throw new OutboxValidationError(
      field('schemaversion'),
      'is missing',
      'The message was not published by tx-outbox (or its envelope was stripped on the way).',
    );
  }
  const version = DIGITS.test(text) ? Number(text) : Number.NaN;
  if (!Number.isSafeInteger(version) || version < 1 || version > MAX_SCHEMA_VERSION) {
    throw new OutboxValidationError(
      field('schemaversion'),
      `is ${JSON.stringify(text.slice(0, 40))}, not a schema version (an integer from 1 to ${MAX_SCHEMA_VERSION})`,
      'Check the publisher.',
    );
  }
  return version;
}
