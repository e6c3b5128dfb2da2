import { OutboxValidationError } from '../errors.js';

/** An event as the producer writes it. */
export interface OutboxEvent {
  /** Kind of aggregate, e.g. `order`. Together with aggregateId it keys ordering and partitioning. */
  readonly aggregateType: string;
  readonly aggregateId: string | number | bigint;
  /** Event type, e.g. `order.created`. */
  readonly type: string;
  /** JSON-serialisable value, or bytes (sent as-is, content type application/octet-stream). */
  readonly payload: unknown;
  /** Destination: NATS subject, webhook endpoint key … Default: decided by the publisher. */
  readonly topic?: string;
  readonly headers?: Readonly<Record<string, string>>;
  /** Default 1. */
  readonly schemaVersion?: number;
  /** Not published before this time (database clock); holds back later events of the aggregate too. */
  readonly deliverAfter?: Date;
  /** Stable event id; default a fresh UUID v7. */
  readonly eventId?: string;
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
}

export const DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
// Whitespace and control characters are rejected by every broker we publish to.
const TOPIC_FORBIDDEN = /[\s\p{Cc}]/u;
const MAX_NAME = 255;
const LONE_SURROGATE_TEXT = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
// JSON.stringify writes a lone surrogate as an escape, which jsonb refuses.
const LONE_SURROGATE =
  /\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f][0-9a-f]{2})|(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2}/i;

function nonEmptyName(value: unknown, field: string, example: string): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw new OutboxValidationError(
      field,
      'is missing or empty',
      `Pass a non-empty string, e.g. ${example}.`,
    );
  }
  if (value.length > MAX_NAME) {
    throw new OutboxValidationError(field, `is ${value.length} characters long`, `Keep it to ${MAX_NAME}.`);
  }
  if (value.includes('\u0000')) {
    throw new OutboxValidationError(
      field,
      'contains a NUL character',
      'Remove it; PostgreSQL text cannot hold NUL.',
    );
  }
  if (LONE_SURROGATE_TEXT.test(value)) {
    throw new OutboxValidationError(
      field,
      'contains a lone UTF-16 surrogate',
      'Pass well-formed Unicode text.',
    );
  }
  return value;
}

function aggregateIdOf(value: unknown, field: string): string {
  if (typeof value === 'number' || typeof value === 'bigint') {
    if (typeof value === 'number' && !Number.isFinite(value)) {
      throw new OutboxValidationError(field, `is ${value}`, 'Pass a string or a finite number.');
    }
    return String(value);
  }
  return nonEmptyName(value, field, "'order-42'");
}

function topicOf(value: unknown, field: string): string | null {
  if (value === undefined || value === null) return null;
  const topic = nonEmptyName(value, field, "'orders.created'");
  if (TOPIC_FORBIDDEN.test(topic)) {
    throw new OutboxValidationError(
      field,
      `${JSON.stringify(topic)} contains whitespace or control characters, which brokers reject`,
      'Use letters, digits and separators such as . - _ / :',
    );
  }
  return topic;
}

function headersOf(value: unknown, field: string): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new OutboxValidationError(field, 'is not an object', 'Pass a { name: value } object of strings.');
  }
  const out: Record<string, string> = {};
  for (const [key, v] of Object.entries(value)) {
    if (key.length === 0 || TOPIC_FORBIDDEN.test(key)) {
      throw new OutboxValidationError(
        `${field}.${key}`,
        'is not a valid header name',
        'Use a token without spaces.',
      );
    }
    if (typeof v !== 'string') {
      throw new OutboxValidationError(
        `${field}.${key}`,
        `is a ${typeof v}`,
        'Header values must be strings.',
      );
    }
    out[key] = v;
  }
  return out;
}

function serialisePayload(value: unknown, field: string): string {
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch (error) {
    const why = error instanceof Error ? error.message : String(error);
    throw new OutboxValidationError(field, `is not JSON-serialisable (${why})`, 'Pass plain data or bytes.');
  }
  if (json === undefined) {
    throw new OutboxValidationError(
      field,
      `is ${typeof value}, which JSON cannot hold`,
      'Pass plain data or bytes.',
    );
  }
  if (LONE_SURROGATE.test(json)) {
    throw new OutboxValidationError(
      field,
      'contains a lone UTF-16 surrogate',
      'PostgreSQL jsonb rejects it: pass well-formed text.',
    );
  }
  if (json.includes('\\u0000')) {
    throw new OutboxValidationError(
      field,
      'contains a NUL character',
      'PostgreSQL jsonb cannot store \\u0000.',
    );
  }
  return json;
}

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
  const aggregateType = nonEmptyName(event.aggregateType, `${field}.aggregateType`, "'order'");
  const aggregateId = aggregateIdOf(event.aggregateId, `${field}.aggregateId`);
  const type = nonEmptyName(event.type, `${field}.type`, "'order.created'");
  const topic = topicOf(event.topic, `${field}.topic`);
  const schemaVersion = event.schemaVersion ?? 1;
  if (!Number.isInteger(schemaVersion) || schemaVersion < 1 || schemaVersion > 2_147_483_647) {
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
  const headers = { ...options.traceHeaders, ...headersOf(event.headers, `${field}.headers`) };

  let payloadJson: string | null = null;
  let payloadBytes: Buffer | null = null;
  let size: number;
  if (event.payload instanceof Uint8Array) {
    payloadBytes = Buffer.from(event.payload.buffer, event.payload.byteOffset, event.payload.byteLength);
    size = payloadBytes.byteLength;
  } else {
    payloadJson = serialisePayload(event.payload, `${field}.payload`);
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
    headers: JSON.stringify(headers),
    deliverAfter,
  };
}
