/**
 * A lean decoder for pgoutput protocol version 1 (the logical replication output plugin built into
 * PostgreSQL). Only what the CDC relay reads is decoded: transaction boundaries, relations, inserts
 * and logical messages. Column values stay in pgoutput's text form as strings (no per-column type
 * parsing: the relay needs a handful of columns of one table, and parses those itself), and a
 * message's content is a slice of the input (the relay decodes it, so copying it here would be waste).
 * Updates, deletes and truncates are not published to the relay's publication; they decode as
 * 'ignored' should another publication's be read.
 */
import { OutboxError } from '../errors.js';
import type { Lsn } from './lsn.js';

export type PgoutputMessage =
  | { readonly tag: 'begin'; readonly finalLsn: Lsn; readonly commitTime: Date; readonly xid: number }
  | { readonly tag: 'commit'; readonly commitLsn: Lsn; readonly endLsn: Lsn; readonly commitTime: Date }
  | {
      readonly tag: 'relation';
      readonly relationId: number;
      readonly schema: string;
      readonly table: string;
      readonly columns: readonly string[];
    }
  | {
      readonly tag: 'insert';
      readonly relationId: number;
      readonly schema: string;
      readonly table: string;
      readonly columns: readonly string[];
      /** Text format, index-aligned with `columns`; null for SQL NULL. */
      readonly values: readonly (string | null)[];
    }
  | {
      readonly tag: 'message';
      readonly transactional: boolean;
      readonly lsn: Lsn;
      readonly prefix: string;
      readonly content: Buffer;
    }
  | { readonly tag: 'origin' | 'type' | 'ignored' };

interface Relation {
  readonly schema: string;
  readonly table: string;
  readonly columns: readonly string[];
}

/** Microseconds from the Unix epoch to PostgreSQL's epoch (2000-01-01 00:00:00 UTC), in ms. */
const PG_EPOCH_MS = 946_684_800_000;
const TWO_32 = 4_294_967_296;

const ORIGIN: PgoutputMessage = Object.freeze({ tag: 'origin' });
const TYPE: PgoutputMessage = Object.freeze({ tag: 'type' });
const IGNORED: PgoutputMessage = Object.freeze({ tag: 'ignored' });

function protocolError(problem: string): OutboxError {
  return new OutboxError(`pgoutput: ${problem}`, { code: 'TXO_CDC_PROTOCOL', retryable: true });
}

/**
 * Decodes pgoutput messages of one replication stream. Stateful: inserts name their relation by id,
 * and the relation message that describes it comes earlier in the same stream.
 */
export class PgoutputDecoder {
  readonly #relations = new Map<number, Relation>();
  readonly #copyContent: boolean;

  /**
   * `copyContent`: copy a logical message's content out of `data` instead of slicing it. Needed when
   * the caller's buffer is reused after the call (pg's protocol parser reuses its read buffer, so a
   * stream that keeps decoded messages buffered must copy).
   */
  constructor(options: { copyContent?: boolean } = {}) {
    this.#copyContent = options.copyContent ?? false;
  }

  /**
   * Decodes one pgoutput message: `data` from `at` to its end (an XLogData frame's payload; the
   * offset saves the stream a subarray per change).
   */
  decode(data: Buffer, at = 0): PgoutputMessage {
    switch (data[at]) {
      case 0x49: // 'I'
        return this.#insert(data, at);
      case 0x42: // 'B'
        return {
          tag: 'begin',
          finalLsn: data.readBigUInt64BE(at + 1),
          commitTime: readTimestamp(data, at + 9),
          xid: data.readUInt32BE(at + 17),
        };
      case 0x43: // 'C': flags (unused, 0) at 1
        return {
          tag: 'commit',
          commitLsn: data.readBigUInt64BE(at + 2),
          endLsn: data.readBigUInt64BE(at + 10),
          commitTime: readTimestamp(data, at + 18),
        };
      case 0x4d: // 'M'
        return this.#message(data, at);
      case 0x52: // 'R'
        return this.#relation(data, at);
      case 0x4f: // 'O'
        return ORIGIN;
      case 0x59: // 'Y'
        return TYPE;
      case 0x55: // 'U'
      case 0x44: // 'D'
      case 0x54: // 'T'
        return IGNORED;
      default:
        throw protocolError(`unexpected message kind 0x${(data[at] ?? 0).toString(16)}`);
    }
  }

  #relation(data: Buffer, at: number): PgoutputMessage {
    const relationId = data.readUInt32BE(at + 1);
    let offset = at + 5;
    const schemaEnd = cstringEnd(data, offset);
    const schema = data.toString('utf8', offset, schemaEnd);
    offset = schemaEnd + 1;
    const tableEnd = cstringEnd(data, offset);
    const table = data.toString('utf8', offset, tableEnd);
    offset = tableEnd + 1 + 1; // replica identity
    const count = data.readUInt16BE(offset);
    offset += 2;
    const columns: string[] = new Array(count);
    for (let i = 0; i < count; i++) {
      offset += 1; // flags (part of the key)
      const nameEnd = cstringEnd(data, offset);
      columns[i] = data.toString('utf8', offset, nameEnd);
      offset = nameEnd + 1 + 8; // type oid, type modifier
    }
    const relation: Relation = { schema, table, columns };
    this.#relations.set(relationId, relation);
    return { tag: 'relation', relationId, schema, table, columns };
  }

  #insert(data: Buffer, at: number): PgoutputMessage {
    const relationId = data.readUInt32BE(at + 1);
    const relation = this.#relations.get(relationId);
    if (relation === undefined)
      throw protocolError(`insert into relation ${relationId} before its relation message`);
    // data[at + 5] is 'N' (a new tuple)
    const count = data.readUInt16BE(at + 6);
    let offset = at + 8;
    const values: (string | null)[] = new Array(count);
    for (let i = 0; i < count; i++) {
      const kind = data[offset];
      if (kind === 0x74) {
        // 't': text
        const length = data.readUInt32BE(offset + 1);
        const start = offset + 5;
        offset = start + length;
        if (offset > data.length) throw protocolError('column value runs past the message');
        values[i] = utf8Slice(data, start, offset);
      } else if (kind === 0x6e || kind === 0x75) {
        // 'n': NULL; 'u': unchanged TOASTed value (updates only)
        values[i] = null;
        offset += 1;
      } else {
        throw protocolError(
          `unexpected column kind 0x${(kind ?? 0).toString(16)} (binary mode is not requested)`,
        );
      }
    }
    return {
      tag: 'insert',
      relationId,
      schema: relation.schema,
      table: relation.table,
      columns: relation.columns,
      values,
    };
  }

  #message(data: Buffer, at: number): PgoutputMessage {
    const transactional = data[at + 1] === 1;
    const lsn = data.readBigUInt64BE(at + 2);
    const prefixEnd = cstringEnd(data, at + 10);
    const prefix = data.toString('utf8', at + 10, prefixEnd);
    const length = data.readUInt32BE(prefixEnd + 1);
    const start = prefixEnd + 5;
    const end = start + length;
    if (end > data.length) throw protocolError('message content runs past the message');
    const content = this.#copyContent ? Buffer.copyBytesFrom(data, start, length) : data.subarray(start, end);
    return { tag: 'message', transactional, lsn, prefix, content };
  }
}

/**
 * UTF-8 text of `data[start, end)`. Buffer's own utf8Slice when present (it is, in every supported
 * Node): toString() spends more on argument handling than on decoding a short column value.
 */
const nativeUtf8Slice = (Buffer.prototype as unknown as { utf8Slice?: (s: number, e: number) => string })
  .utf8Slice;
function utf8Slice(data: Buffer, start: number, end: number): string {
  return nativeUtf8Slice === undefined
    ? data.toString('utf8', start, end)
    : nativeUtf8Slice.call(data, start, end);
}

function cstringEnd(data: Buffer, offset: number): number {
  const end = data.indexOf(0, offset);
  if (end < 0) throw protocolError('unterminated string');
  return end;
}

/** A pgoutput timestamp: int64 microseconds since 2000-01-01 UTC (millisecond precision in a Date). */
function readTimestamp(data: Buffer, offset: number): Date {
  const micros = data.readInt32BE(offset) * TWO_32 + data.readUInt32BE(offset + 4);
  return new Date(Math.floor(micros / 1000) + PG_EPOCH_MS);
}

const TIMESTAMPTZ =
  /^(\d{4,})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?(?:([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?)?( BC)?$/;

/**
 * Parses a timestamptz in the text form PostgreSQL sends with DateStyle=ISO (which the replication
 * connection sets): '2026-12-01 23:15:24.123456+00', any offset, 'infinity' and '-infinity' (as the
 * latest and earliest Date). Millisecond precision, as a Date has.
 */
export function parseTimestamptz(text: string): Date {
  if (text === 'infinity') return new Date(8.64e15);
  if (text === '-infinity') return new Date(-8.64e15);
  const m = TIMESTAMPTZ.exec(text);
  if (m === null) throw protocolError(`'${text}' is not a timestamptz`);
  let year = Number(m[1]);
  if (m[12] !== undefined) year = 1 - year;
  const ms = m[7] === undefined ? 0 : Math.floor(Number(`${m[7]}000000`.slice(0, 6)) / 1000);
  let offsetSeconds = 0;
  if (m[8] !== undefined) {
    offsetSeconds = Number(m[9]) * 3600 + Number(m[10] ?? 0) * 60 + Number(m[11] ?? 0);
    if (m[8] === '-') offsetSeconds = -offsetSeconds;
  }
  const utc = new Date(0);
  utc.setUTCFullYear(year, Number(m[2]) - 1, Number(m[3]));
  utc.setUTCHours(Number(m[4]), Number(m[5]), Number(m[6]), ms);
  return new Date(utc.getTime() - offsetSeconds * 1000);
}
