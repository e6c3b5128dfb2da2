/**
 * Who may write an event into the stream. Any login may call `pg_logical_emit_message` (unless a
 * deployment revokes it: `tx-outbox roles --section wal`), so a message with the events prefix
 * proves nothing by itself. A WAL-mode message of format 2 ends with HMAC-SHA256(the schema's WAL
 * key, the content before it), computed by `enqueue`'s own statement from `wal_key` (migration
 * 12), which only the schema's owner, the producer role and the relay role may read: the relay
 * publishes a message only if its MAC verifies — a role with the producer's rights wrote it — and
 * it passes `enqueue`'s validation (decodeWalEvent).
 *
 * What fails is refused: not published, not stored, its claimed aggregate untouched (a forged A#4
 * or B#1000 changes nothing for the genuine ones), counted and logged (rate-limited, never the
 * content or the key). A message that verifies but is not an event `enqueue` writes (another
 * format version, a producer bypassing `enqueue`) came from a holder of the producer's rights: it
 * is kept as a dead `tx-outbox.undecodable` event, as before, on an aggregate of its own.
 *
 * Format 1 (tx-outbox before migration 12) carries no MAC. It is read only when written before
 * the key existed (the upgrade's backlog: `wal_key.created_lsn`), or with `acceptWalFormat1`
 * while older producers still run; otherwise refused.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { Pool } from 'pg';
import { OutboxError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { CounterMetric } from '../metrics/sink.js';
import {
  decodeWalEvent,
  WAL_FORMAT_UNSIGNED,
  WAL_FORMAT_VERSION,
  WAL_MAC_BYTES,
  type WalEvent,
  type WalSchema,
} from '../producer/wal-message.js';
import { withSchema } from '../schema/identifiers.js';
import { formatLsn, type Lsn, parseLsn } from './lsn.js';

/** The key, where the WAL stood when it was made, and the database's encoding (for partitionOf). */
export const WAL_KEY_SQL = `
SELECT w.ipad, w.created_lsn::text AS created_lsn, current_setting('server_encoding') AS encoding
FROM {{schema}}.wal_key w`;

const IPAD = 0x36;

/**
 * A schema's WAL key, as the relay holds it: the 64-byte padded key (ipad XOR 0x36), private to
 * this object (never in a log line, an error or `stats()`).
 */
export class WalKey {
  readonly #key: Buffer;

  constructor(
    ipad: Buffer,
    /** The WAL insert position when the key was made: format 1 before it predates every key. */
    readonly createdLsn: Lsn,
  ) {
    if (ipad.length !== 64) {
      throw new OutboxError(`the WAL key's ipad is ${ipad.length} bytes, not 64`, {
        code: 'TXO_CDC_BAD_KEY',
      });
    }
    this.#key = Buffer.alloc(64);
    for (let i = 0; i < 64; i++) this.#key[i] = ipad[i]! ^ IPAD;
  }

  /** HMAC-SHA256 of `data`: what the producer's statement appends (sha256(opad || sha256(ipad || data))). */
  mac(data: Uint8Array): Buffer {
    return createHmac('sha256', this.#key).update(data).digest();
  }

  /** Whether `content` ends with the MAC of what comes before it (compared in constant time). */
  verify(content: Buffer): boolean {
    if (content.length <= WAL_MAC_BYTES) return false;
    const at = content.length - WAL_MAC_BYTES;
    return timingSafeEqual(this.mac(content.subarray(0, at)), content.subarray(at));
  }

  /** Never the key: for a logger or inspector that walks the object. */
  toJSON(): string {
    return `WalKey(created ${formatLsn(this.createdLsn)})`;
  }
}

/** The key of a schema and what the relay checks messages against, read at start and per stream. */
export interface LoadedWalKey {
  readonly key: WalKey;
  /** server_encoding is UTF8 (see WalSchema.utf8). */
  readonly utf8: boolean;
}

/**
 * Reads the schema's WAL key. A missing table (a schema before migration 12), a role that may not
 * read it, or an empty table is a setup mistake, said with its fix (TXO_SCHEMA_OUTDATED,
 * TXO_NO_PRIVILEGE, TXO_CDC_NO_KEY); anything else (the database away) is thrown as it is.
 */
export async function loadWalKey(
  pool: Pick<Pool, 'query'>,
  schema: string,
  quotedSchema: string,
): Promise<LoadedWalKey> {
  let rows: Array<{ ipad: Buffer; created_lsn: string; encoding: string }>;
  try {
    ({ rows } = await pool.query(withSchema(WAL_KEY_SQL, quotedSchema)));
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === '42P01') {
      throw new OutboxError(
        `the outbox schema "${schema}" has no wal_key table (migration 12), which the CDC relay needs to authenticate WAL-mode events; run tx-outbox migrate`,
        { code: 'TXO_SCHEMA_OUTDATED', cause: error },
      );
    }
    if (code === '42501') {
      throw new OutboxError(
        `the relay's database role may not read "${schema}".wal_key, which the CDC relay needs to authenticate WAL-mode events; re-run the grants of \`tx-outbox roles --print-sql\` (the relay role gets SELECT on it)`,
        { code: 'TXO_NO_PRIVILEGE', cause: error },
      );
    }
    throw error;
  }
  const row = rows[0];
  if (!row) {
    throw new OutboxError(
      `"${schema}".wal_key holds no key, so no WAL-mode event can be authenticated; see docs/cdc.md (Who can write events) to make one`,
      { code: 'TXO_CDC_NO_KEY' },
    );
  }
  return { key: new WalKey(row.ipad, parseLsn(row.created_lsn)), utf8: row.encoding === 'UTF8' };
}

/** Why a message was refused: the `reason` label of tx_outbox_cdc_refused_messages_total. */
export type WalRefusalReason =
  /** No MAC, or a MAC that does not verify: not written by a role that may read the key. */
  | 'unauthenticated'
  /** Format 1 (no MAC) written after the key existed, without `acceptWalFormat1`. */
  | 'format_1'
  /** Format 1 that was read (before the key, or accepted) but is not an event `enqueue` writes. */
  | 'invalid';

export type WalReading =
  | { readonly kind: 'event'; readonly event: WalEvent }
  /** Authenticated, but not an event this relay can publish: kept dead, `content` (without its MAC) as the payload. */
  | { readonly kind: 'dead'; readonly problem: string; readonly content: Buffer }
  | { readonly kind: 'refused'; readonly reason: WalRefusalReason };

/** What the stream batcher asks of a WAL-mode message (src/cdc/stream-batch.ts). */
export interface WalMessageReader {
  read(content: Buffer, lsn: Lsn, transactional: boolean): WalReading;
}

const NOT_TRANSACTIONAL = 'is not transactional (pg_logical_emit_message(false, …))';

/** One stream session's reader: the key read for it, the schema's partitions, the format-1 rule. */
export class WalReader implements WalMessageReader {
  constructor(
    private readonly key: WalKey,
    private readonly schema: WalSchema,
    private readonly acceptFormat1: boolean,
    private readonly refusals: WalRefusals,
  ) {}

  read(content: Buffer, lsn: Lsn, transactional: boolean): WalReading {
    const version = content.length === 0 ? undefined : content[0];
    if (version === WAL_FORMAT_UNSIGNED) return this.readUnsigned(content, lsn, transactional);
    if (!this.key.verify(content)) return this.refuse('unauthenticated', lsn);
    const data = content.subarray(0, content.length - WAL_MAC_BYTES);
    if (!transactional) return { kind: 'dead', problem: NOT_TRANSACTIONAL, content: data };
    if (version !== WAL_FORMAT_VERSION) {
      // decodeWalEvent says which versions this one reads.
      return { kind: 'dead', problem: problemOf(() => decodeWalEvent(data)), content: data };
    }
    return this.decode(content, data);
  }

  private readUnsigned(content: Buffer, lsn: Lsn, transactional: boolean): WalReading {
    if (!this.acceptFormat1 && lsn >= this.key.createdLsn) return this.refuse('format_1', lsn);
    // Read as tx-outbox before migration 12 read it, with today's checks.
    if (!transactional) return { kind: 'dead', problem: NOT_TRANSACTIONAL, content };
    return this.decode(content, content);
  }

  /** The event, or dead with decodeWalEvent's reason and `data` (the content without its MAC). */
  private decode(content: Buffer, data: Buffer): WalReading {
    try {
      return { kind: 'event', event: decodeWalEvent(content, this.schema) };
    } catch (error) {
      return { kind: 'dead', problem: (error as Error).message, content: data };
    }
  }

  private refuse(reason: WalRefusalReason, lsn: Lsn): WalReading {
    this.refusals.refused(reason, lsn);
    return { kind: 'refused', reason };
  }
}

function problemOf(decode: () => unknown): string {
  try {
    decode();
    return 'is not a message this relay reads';
  } catch (error) {
    return (error as Error).message;
  }
}

const MESSAGES: Readonly<Record<WalRefusalReason, string>> = {
  unauthenticated:
    "WAL-mode message refused: its MAC does not verify, so no role with the producer's rights wrote it (a forgery, or a key replaced under a running producer); not published, not stored",
  format_1:
    'WAL-mode message refused: format 1 (no MAC, as tx-outbox before migration 12 wrote it) written after the WAL key existed, so anyone may have written it; not published, not stored. A producer of an older tx-outbox still running? Upgrade it (docs/cdc.md, Upgrading WAL mode)',
  invalid: 'WAL-mode message refused: format 1 and not an event enqueue writes; not published, not stored',
};

/** How often a refusal is logged at most (per reason); the lines say how many since the last. */
const REFUSAL_LOG_MS = 10_000;

/**
 * The relay's count of refused messages (stats, the metric) and its log of them: the first of a
 * reason at once, then at most one line per reason every 10 s with the count since the last line
 * and the latest position. A flood of forgeries costs a few lines a minute.
 */
export class WalRefusals {
  readonly #counts: Record<WalRefusalReason, number> = { unauthenticated: 0, format_1: 0, invalid: 0 };
  readonly #log = new Map<WalRefusalReason, { at: number; since: number }>();

  constructor(
    private readonly logger: Logger,
    private readonly context: Readonly<Record<string, unknown>>,
    private readonly metric: CounterMetric | undefined,
    private readonly now: () => number = Date.now,
  ) {}

  refused(reason: WalRefusalReason, lsn: Lsn): void {
    this.#counts[reason] += 1;
    this.metric?.inc({ reason });
    const now = this.now();
    const last = this.#log.get(reason);
    if (last && now - last.at < REFUSAL_LOG_MS) {
      last.since += 1;
      return;
    }
    this.#log.set(reason, { at: now, since: 0 });
    const fields = { ...this.context, reason, lsn: formatLsn(lsn), refused: 1 + (last?.since ?? 0) };
    this.logger.warn(fields, MESSAGES[reason]);
  }

  /** Refused messages so far, by reason. */
  get counts(): Readonly<Record<WalRefusalReason, number>> {
    return { ...this.#counts };
  }

  get total(): number {
    return this.#counts.unauthenticated + this.#counts.format_1 + this.#counts.invalid;
  }
}
