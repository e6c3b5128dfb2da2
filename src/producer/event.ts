import { OutboxValidationError } from '../errors.js';
import { RESERVED_TYPE_PREFIX, SKIPPED_EVENT_TYPE } from '../skip-marker.js';
import { headersJsonOf } from './headers.js';
import { aggregateIdOf, checkDefaultTopic, identifierOf, topicOf } from './names.js';
import { payloadJsonOf } from './payload.js';

/** The largest schema version: the `schema_version` columns are PostgreSQL integers. */
export const MAX_SCHEMA_VERSION = 2_147_483_647;

/** An event as the producer writes it. */
export interface OutboxEvent {
  /**
   * Kind of aggregate, e.g. `order`: any text without control characters, noncharacters or
   * whitespace at either end, at most 255 UTF-8 bytes. Together with aggregateId it keys
   * ordering and partitioning.
   */
  readonly aggregateType: string;
  /** A string (well-formed, no control characters or noncharacters, at most 255 UTF-8 bytes), bigint or safe integer. */
  readonly aggregateId: string | number | bigint;
  /**
   * Event type, e.g. `order.created`: the CloudEvents `type`, any text without control
   * characters, noncharacters or whitespace at either end, at most 255 UTF-8 bytes. Without a
   * `topic`, `<aggregateType>.<type>` must be a topic too (no whitespace, no wildcards).
   */
  readonly type: string;
  /**
   * Plain data JSON writes faithfully (no NaN, Map, Set, ArrayBuffer …), or bytes as a
   * Uint8Array or Buffer (sent as-is, content type application/octet-stream).
   */
  readonly payload: unknown;
  /**
   * Destination: NATS subject, webhook endpoint key … (no wildcards, `$` or empty tokens).
   * Default: decided by the publisher, usually `<aggregateType>.<type>`.
   */
  readonly topic?: string;
  /**
   * RFC 9110 token names (not `ce-*`, `Nats-*` … see docs/guarantees.md), printable-ASCII values;
   * at most 8192 bytes, each header counted as 2 × name + value + 5.
   */
  readonly headers?: Readonly<Record<string, string>>;
  /** Default 1. */
  readonly schemaVersion?: number;
  /** Not published before this time (database clock); holds back later events of the aggregate too. */
  readonly deliverAfter?: Date;
  /** Stable event id; default a fresh UUID v7. */
  readonly eventId?: string;
  /**
   * The aggregate's version, when the caller keeps one — e.g. the business row's `version`,
   * bumped by the UPDATE that locks the row in this transaction. The event then takes it as its
   * sequence, and no sequence row is written (the cheaper path). The versions of one aggregate
   * must rise by exactly one per event, starting at 1, and every event of that aggregate must carry
   * one (docs/guarantees.md, Caller versions). Default: the next gap-free sequence, assigned here.
   */
  readonly sequence?: number;
}

/** An event after validation, in the shape the insert statement takes. */
export interface PreparedEvent {
  readonly eventId: string;
  readonly aggregateType: string;
  readonly aggregateId: string;
  readonly type: string;
  readonly schemaVersion: number;
  readonly topic: string | null;
  readonly payloadJson: string | null;
  readonly payloadBytes: Buffer | null;
  readonly headers: string;
  readonly deliverAfter: Date | null;
  /** The caller's version (`OutboxEvent.sequence`), or null for the next gap-free sequence. */
  readonly sequence: number | null;
  /** Payload and headers, in bytes: what counts towards `maxBatchBytes`. */
  readonly bytes: number;
}

export const DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024;
/**
 * The most `maxBatchBytes` may be, so the most one event's payload and headers take: the statement
 * carries a batch as text arrays of about twice its size. The CDC relay refuses a WAL-mode event
 * above it (src/producer/wal-message.ts).
 */
export const MAX_BATCH_BYTES_LIMIT = 128 * 1024 * 1024;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Validates one event and turns it into statement parameters. Throws OutboxValidationError. */
export function prepareEvent(
  event: OutboxEvent,
  field: string,
  options: { maxPayloadBytes: number; newEventId: () => string; traceHeaders: Record<string, string> },
): PreparedEvent {
  if (event === null || typeof event !== 'object') {
    throw new OutboxValidationError(
      field,
      'is not an object',
      'Pass { aggregateType, aggregateId, type, payload }.',
    );
  }
  const aggregateType = identifierOf(event.aggregateType, `${field}.aggregateType`, "'order'");
  const aggregateId = aggregateIdOf(event.aggregateId, `${field}.aggregateId`);
  const type = identifierOf(event.type, `${field}.type`, "'order.created'");
  if (type.startsWith(RESERVED_TYPE_PREFIX)) {
    throw new OutboxValidationError(
      `${field}.type`,
      `starts with '${RESERVED_TYPE_PREFIX}', the prefix of tx-outbox's own events (the skip marker ${SKIPPED_EVENT_TYPE})`,
      "Choose another type, e.g. 'order.created'.",
    );
  }
  const topic = topicOf(event.topic, `${field}.topic`);
  if (topic === null) checkDefaultTopic(aggregateType, type, field);
  const schemaVersion = event.schemaVersion ?? 1;
  if (!Number.isInteger(schemaVersion) || schemaVersion < 1 || schemaVersion > MAX_SCHEMA_VERSION) {
    throw new OutboxValidationError(
      `${field}.schemaVersion`,
      `is ${String(schemaVersion)}`,
      'Pass a positive integer.',
    );
  }
  let deliverAfter: Date | null = null;
  if (event.deliverAfter !== undefined && event.deliverAfter !== null) {
    if (!(event.deliverAfter instanceof Date) || Number.isNaN(event.deliverAfter.getTime())) {
      throw new OutboxValidationError(
        `${field}.deliverAfter`,
        'is not a valid Date',
        'Pass a Date or omit it.',
      );
    }
    deliverAfter = event.deliverAfter;
  }
  let eventId: string;
  if (event.eventId === undefined) eventId = options.newEventId();
  else if (typeof event.eventId === 'string' && UUID.test(event.eventId))
    eventId = event.eventId.toLowerCase();
  else {
    throw new OutboxValidationError(
      `${field}.eventId`,
      `${JSON.stringify(event.eventId)} is not a UUID`,
      'Omit it for a UUID v7.',
    );
  }
  const headers = headersJsonOf(event.headers, `${field}.headers`, options.traceHeaders);
  let sequence: number | null = null;
  if (event.sequence !== undefined && event.sequence !== null) {
    if (!Number.isSafeInteger(event.sequence) || event.sequence < 1) {
      throw new OutboxValidationError(
        `${field}.sequence`,
        typeof event.sequence === 'number' ? `is ${event.sequence}` : `is a ${typeof event.sequence}`,
        "Pass the aggregate's version as a number: a positive safe integer (an aggregate's first event is 1), or omit it.",
      );
    }
    sequence = event.sequence;
  }

  let payloadJson: string | null = null;
  let payloadBytes: Buffer | null = null;
  let size: number;
  if (event.payload instanceof Uint8Array) {
    payloadBytes = Buffer.from(event.payload.buffer, event.payload.byteOffset, event.payload.byteLength);
    size = payloadBytes.byteLength;
  } else {
    payloadJson = payloadJsonOf(event.payload, `${field}.payload`);
    size = Buffer.byteLength(payloadJson);
  }
  if (size > options.maxPayloadBytes) {
    throw new OutboxValidationError(
      `${field}.payload`,
      `is ${size} bytes, over the limit of ${options.maxPayloadBytes}`,
      'Store large data elsewhere and send a reference, or raise maxPayloadBytes (and the broker limit).',
    );
  }
  return {
    eventId,
    aggregateType,
    aggregateId,
    type,
    schemaVersion,
    topic,
    payloadJson,
    payloadBytes,
    headers,
    deliverAfter,
    sequence,
    bytes: size + headers.length,
  };
}
