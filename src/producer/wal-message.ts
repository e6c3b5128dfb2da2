/**
 * The WAL-mode event message: what `enqueue(tx, e, { via: 'wal' })` writes with
 * `pg_logical_emit_message(true, eventsPrefix(schema), content)` instead of an events row, and what
 * the CDC relay reads back from the slot (`decodeWalEvent`, after src/cdc/wal-auth.ts verified it).
 *
 * content, big-endian, version 2:
 *
 *   written by the statement (SQL):   u8 version (2) · i64 sequence · i64 sequence_base ·
 *                                     i16 partition · i64 created_at (µs since the Unix epoch)
 *   encoded once by the client:       u8 flags (1 = bytes payload, 2 = topic given, 4 = caller version) ·
 *                                     16 bytes event id ·
 *                                     u16 + aggregate_type · u16 + aggregate_id · u16 + event_type ·
 *                                     i32 schema_version · [u16 + topic] · u32 + headers (JSON text;
 *                                     length 0 for none) · the payload, raw
 *   written by the statement (SQL):   32 bytes HMAC-SHA256(the schema's WAL key, everything before)
 *
 * Version 1 (tx-outbox before migration 12) is the same without the HMAC. The version byte comes
 * first so a relay can refuse a message it does not know before reading anything else; the MAC
 * comes last so that it can be verified whatever the version. The SQL parts are fixed-width, so
 * the statement writes them with int8send/int2send, a concatenation and sha256(). The payload is
 * raw: the relay hands a slice of the message to the publisher, never parsing the JSON more than
 * to check it (it is JSON.stringify's text as validated by `enqueue`, where the table mode stores
 * jsonb's canonical text of the same value).
 */
import { isUtf8 } from 'node:buffer';
import { OutboxError } from '../errors.js';
import { RESERVED_TYPE_PREFIX } from '../skip-marker.js';
import type { PreparedEvent } from './event.js';
import { MAX_BATCH_BYTES_LIMIT } from './event.js';
import { headersJsonOf, MAX_HEADERS_BYTES } from './headers.js';
import { aggregateIdOf, checkDefaultTopic, identifierOf, topicOf } from './names.js';
import { partitionOf } from './partition-of.js';
import { jsonTextProblem } from './payload.js';

/** The format this version writes (authenticated), and reads. */
export const WAL_FORMAT_VERSION = 2;
/** The unauthenticated format of tx-outbox before migration 12, read only as src/cdc/wal-auth.ts allows. */
export const WAL_FORMAT_UNSIGNED = 1;
/** Bytes of the statement-written part (version included): the client body starts here. */
export const WAL_HEADER_BYTES = 1 + 8 + 8 + 2 + 8;
/** Bytes of the HMAC-SHA256 at the end of a message of {@link WAL_FORMAT_VERSION}. */
export const WAL_MAC_BYTES = 32;

const FLAG_BYTES = 1;
const FLAG_TOPIC = 2;
/** The sequence is the caller's version (`sequence` given), not the gap-free counter's. */
const FLAG_CALLER = 4;

/** The message prefix of WAL-mode events of a schema. */
export function eventsPrefix(schema: string): string {
  return `tx-outbox:${schema}`;
}

/** The message prefix of the CDC relay's heartbeats of a schema (non-transactional, empty content). */
export function heartbeatPrefix(schema: string): string {
  return `tx-outbox:${schema}:heartbeat`;
}

/**
 * The SQL expression of one message's content before its MAC: the version byte and the fixed
 * header from the statement's own values, then the client's body. `sequence`, `sequenceBase` are
 * bigint expressions, `partition` a smallint one, `body` a bytea one. The statement appends the
 * MAC (src/producer/enqueue-wal-sql.ts).
 */
export function walContentSql(
  sequence: string,
  sequenceBase: string,
  partition: string,
  body: string,
): string {
  const version = WAL_FORMAT_VERSION.toString(16).padStart(2, '0');
  return (
    `'\\x${version}'::bytea || int8send(${sequence}) || int8send(${sequenceBase}) || int2send(${partition})` +
    ` || int8send((extract(epoch FROM now()) * 1000000)::bigint) || ${body}`
  );
}

/** A WAL-mode event as the relay reads it: everything an `OutboxMessage` needs, plus its partition. */
export interface WalEvent {
  readonly eventId: string;
  readonly aggregateType: string;
  readonly aggregateId: string;
  readonly sequence: number;
  /** 0 unless the aggregate was created after the pruner ran (as `OutboxMessage.sequenceBase`). */
  readonly sequenceBase: number;
  /**
   * The sequence is the caller's version (`enqueue`'s `sequence`): the relay checks it against
   * the aggregate's last delivered one (a repeat, a gap), as the polling relay's gate does.
   */
  readonly callerVersion: boolean;
  /** `partition_of(aggregate_type, aggregate_id)`, computed by the statement. */
  readonly partition: number;
  readonly type: string;
  readonly schemaVersion: number;
  readonly topic: string | null;
  /** A slice of the message: the JSON text or the raw bytes, as enqueued. */
  readonly payload: Buffer;
  readonly contentType: 'application/json' | 'application/octet-stream';
  readonly headers: Readonly<Record<string, string>>;
  /** The producing transaction's `now()` (microseconds truncated to milliseconds). */
  readonly createdAt: Date;
}

/** The client's part of the content (after {@link WAL_HEADER_BYTES}), encoded once per event. */
export function encodeWalBody(e: PreparedEvent): Buffer {
  const aggregateType = Buffer.byteLength(e.aggregateType);
  const aggregateId = Buffer.byteLength(e.aggregateId);
  const type = Buffer.byteLength(e.type);
  const topic = e.topic === null ? -1 : Buffer.byteLength(e.topic);
  const headers = e.headers === '{}' ? 0 : Buffer.byteLength(e.headers);
  const payload = e.payloadBytes ? e.payloadBytes.byteLength : Buffer.byteLength(e.payloadJson ?? 'null');
  const size =
    1 +
    16 +
    2 +
    aggregateType +
    2 +
    aggregateId +
    2 +
    type +
    4 +
    (topic < 0 ? 0 : 2 + topic) +
    4 +
    headers +
    payload;
  const b = Buffer.allocUnsafe(size);
  const flags =
    (e.payloadBytes ? FLAG_BYTES : 0) |
    (topic < 0 ? 0 : FLAG_TOPIC) |
    (e.sequence === null ? 0 : FLAG_CALLER);
  let at = b.writeUInt8(flags, 0);
  at += b.write(e.eventId.replaceAll('-', ''), at, 16, 'hex');
  at = writeShortText(b, at, e.aggregateType, aggregateType);
  at = writeShortText(b, at, e.aggregateId, aggregateId);
  at = writeShortText(b, at, e.type, type);
  at = b.writeInt32BE(e.schemaVersion, at);
  if (e.topic !== null) at = writeShortText(b, at, e.topic, topic);
  at = b.writeUInt32BE(headers, at);
  if (headers > 0) at += b.write(e.headers, at, headers, 'utf8');
  if (e.payloadBytes) e.payloadBytes.copy(b, at);
  else b.write(e.payloadJson ?? 'null', at, payload, 'utf8');
  return b;
}

function writeShortText(b: Buffer, at: number, text: string, bytes: number): number {
  const next = b.writeUInt16BE(bytes, at);
  return next + b.write(text, next, bytes, 'utf8');
}

/**
 * Room for the trace-context headers `enqueue` merges in after its own check of
 * {@link MAX_HEADERS_BYTES} (traceparent, and a tracestate OpenTelemetry keeps to 512 characters).
 */
const TRACE_HEADERS_ALLOWANCE = 2048;

/** What the relay knows of the schema to check a message against: its partitions. */
export interface WalSchema {
  /** The schema's partition count (config.partitions). */
  readonly partitions: number;
  /** The database's encoding is UTF-8 (else only ASCII keys' partitions are checked: see partitionOf). */
  readonly utf8: boolean;
}

/** Below this a first byte may be a later format version; text (`{`, a letter) starts here. */
const FIRST_TEXT_BYTE = 0x20;

/**
 * Why a first byte is no format this relay reads: a later version's (a producer of a newer
 * tx-outbox), or no tx-outbox format at all (damaged, or written by something else under the
 * events prefix) — never blamed on another version when it is not one.
 */
function unknownFormat(version: number): string {
  if (version > WAL_FORMAT_VERSION && version < FIRST_TEXT_BYTE) {
    return (
      `is in format version ${version}, newer than the versions this tx-outbox reads (${WAL_FORMAT_UNSIGNED} and ${WAL_FORMAT_VERSION}): ` +
      'a producer of a later tx-outbox version wrote it; upgrade the relay no later than the producers'
    );
  }
  return (
    `starts with byte 0x${version.toString(16).padStart(2, '0')}, which is no tx-outbox format version: ` +
    'the message is damaged, or something other than enqueue wrote it under the events prefix'
  );
}

/**
 * Reads a WAL-mode event message (the `content` of a pgoutput 'M' message with the events
 * prefix) of format 2 (its MAC, not verified here, left out: src/cdc/wal-auth.ts verifies first)
 * or 1. Throws OutboxError TXO_CDC_BAD_MESSAGE for another format version, a message cut short,
 * or one `enqueue` would not have written — the producer's own rules (names, header shape, a
 * JSON payload jsonb takes, nested at most MAX_JSON_DEPTH deep, payload and headers within
 * `maxBatchBytes`' limit), a sequence below 1 or not above its sequence_base, a caller's version
 * with a sequence_base, and, given `schema`, a partition other than partition_of's. It never
 * guesses: what it returns reaches publishers and the handover statement.
 */
export function decodeWalEvent(content: Uint8Array, schema?: WalSchema): WalEvent {
  const whole = Buffer.isBuffer(content)
    ? content
    : Buffer.from(content.buffer, content.byteOffset, content.byteLength);
  if (whole.length === 0) throw bad('is empty');
  const version = whole[0]!;
  if (version !== WAL_FORMAT_VERSION && version !== WAL_FORMAT_UNSIGNED) throw bad(unknownFormat(version));
  const b =
    version === WAL_FORMAT_VERSION ? whole.subarray(0, Math.max(1, whole.length - WAL_MAC_BYTES)) : whole;
  const r = new Reader(b, 1);
  const sequence = r.int64('sequence');
  const sequenceBase = r.int64('sequence_base');
  const partition = r.int16('partition');
  const createdAtMicros = r.bigint64('created_at');
  const flags = r.uint8('flags');
  if ((flags & ~(FLAG_BYTES | FLAG_TOPIC | FLAG_CALLER)) !== 0) throw bad(`has unknown flags ${flags}`);
  const eventId = uuidOf(r.bytes(16, 'event id'));
  const aggregateType = r.shortText('aggregate_type');
  const aggregateId = r.shortText('aggregate_id');
  const type = r.shortText('event_type');
  const schemaVersion = r.int32('schema_version');
  const topic = flags & FLAG_TOPIC ? r.shortText('topic') : null;
  const headersLength = r.uint32('headers length');
  const headers = headersLength === 0 ? {} : headersOf(r.bytes(headersLength, 'headers'));
  const bytes = (flags & FLAG_BYTES) !== 0;
  const callerVersion = (flags & FLAG_CALLER) !== 0;
  const payload = b.subarray(r.at);
  checkNames(aggregateType, aggregateId, type, topic);
  if (sequence < 1) throw bad(`has a sequence of ${sequence}`);
  if (sequenceBase >= sequence)
    throw bad(`has a sequence_base of ${sequenceBase}, not below its sequence ${sequence}`);
  if (callerVersion && sequenceBase !== 0)
    throw bad(`has a caller's version (${sequence}) with a sequence_base of ${sequenceBase}`);
  if (schemaVersion < 1) throw bad(`has a schema_version of ${schemaVersion}`);
  if (schema !== undefined) {
    const expected = partitionOf(aggregateType, aggregateId, schema.partitions, schema.utf8);
    if (expected !== undefined && partition !== expected)
      throw bad(
        `has a partition of ${partition}, where partition_of gives ${expected} of ${schema.partitions}`,
      );
  }
  const createdAt = new Date(Number(createdAtMicros / 1000n));
  if (Number.isNaN(createdAt.getTime())) throw bad(`has a created_at of ${createdAtMicros} µs`);
  if (payload.length + headersLength > MAX_BATCH_BYTES_LIMIT)
    throw bad(
      `has ${payload.length + headersLength} bytes of payload and headers, over the ${MAX_BATCH_BYTES_LIMIT} enqueue takes`,
    );
  if (!bytes) {
    if (!isUtf8(payload)) throw bad('has a JSON payload that is not UTF-8');
    const problem = jsonTextProblem(payload.toString('utf8'));
    if (problem !== undefined) throw bad(`has a JSON payload that ${problem}`);
  }
  return {
    eventId,
    aggregateType,
    aggregateId,
    sequence,
    sequenceBase,
    callerVersion,
    partition,
    type,
    schemaVersion,
    topic,
    payload,
    contentType: bytes ? 'application/octet-stream' : 'application/json',
    headers,
    createdAt,
  };
}

/** The producer's checks of the names (`enqueue` ran the same ones on the way in). */
function checkNames(aggregateType: string, aggregateId: string, type: string, topic: string | null): void {
  try {
    identifierOf(aggregateType, 'aggregate_type', "'order'");
    aggregateIdOf(aggregateId, 'aggregate_id');
    identifierOf(type, 'event_type', "'order.created'");
    if (type.startsWith(RESERVED_TYPE_PREFIX))
      throw bad(`has an event_type in tx-outbox's own prefix '${RESERVED_TYPE_PREFIX}'`);
    if (topic === null) checkDefaultTopic(aggregateType, type, 'event');
    else topicOf(topic, 'topic');
  } catch (error) {
    if (error instanceof OutboxError) throw error;
    throw bad(`fails enqueue's checks: ${(error as Error).message}`);
  }
}

/** The headers as `enqueue` wrote them: a JSON object of valid names and string values. */
function headersOf(text: Buffer): Record<string, string> {
  let value: unknown;
  try {
    value = JSON.parse(text.toString('utf8'));
  } catch {
    throw bad('has headers that are not valid JSON');
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw bad(
      `has headers that are not a JSON object (${value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value})`,
    );
  try {
    headersJsonOf(value, 'headers', {}, MAX_HEADERS_BYTES + TRACE_HEADERS_ALLOWANCE);
  } catch (error) {
    throw bad(`fails enqueue's checks: ${(error as Error).message}`);
  }
  return value as Record<string, string>;
}

function bad(problem: string): OutboxError {
  return new OutboxError(`a WAL-mode event message ${problem}`, { code: 'TXO_CDC_BAD_MESSAGE' });
}

function uuidOf(b: Buffer): string {
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** Bounds-checked big-endian reads; a short message names the field it ran out in. */
class Reader {
  constructor(
    private readonly b: Buffer,
    public at: number,
  ) {}

  private need(n: number, field: string): number {
    const at = this.at;
    if (at + n > this.b.length) throw bad(`is cut short in its ${field} (${this.b.length} bytes)`);
    this.at = at + n;
    return at;
  }
  uint8(field: string): number {
    return this.b.readUInt8(this.need(1, field));
  }
  int16(field: string): number {
    return this.b.readInt16BE(this.need(2, field));
  }
  int32(field: string): number {
    return this.b.readInt32BE(this.need(4, field));
  }
  uint32(field: string): number {
    return this.b.readUInt32BE(this.need(4, field));
  }
  bigint64(field: string): bigint {
    return this.b.readBigInt64BE(this.need(8, field));
  }
  int64(field: string): number {
    const n = this.bigint64(field);
    if (n < 0n || n > BigInt(Number.MAX_SAFE_INTEGER)) throw bad(`has a ${field} of ${n}`);
    return Number(n);
  }
  bytes(n: number, field: string): Buffer {
    const at = this.need(n, field);
    return this.b.subarray(at, at + n);
  }
  shortText(field: string): string {
    const n = this.b.readUInt16BE(this.need(2, `${field} length`));
    return this.bytes(n, field).toString('utf8');
  }
}
