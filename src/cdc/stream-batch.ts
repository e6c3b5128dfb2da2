import { randomUUID } from 'node:crypto';
import { aggregateKeyOf } from '../aggregate-key.js';
import { type EventRow, toMessage } from '../core/event-row.js';
import type { OutboxMessage } from '../core/message.js';
import type { WalEvent } from '../producer/wal-message.js';
import type { AckTracker, AckUnit } from './acks.js';
import { formatLsn, type Lsn } from './lsn.js';
import { parseTimestamptz } from './pgoutput.js';
import type { StreamChange } from './replication.js';
import type { WalMessageReader } from './wal-auth.js';

/** An event read from the stream: a table-mode insert or a WAL-mode message. */
export interface StreamEvent {
  /** The stream unit (transaction) it settles. */
  readonly unit: AckUnit;
  /** Its transaction's id (32 bits, as the stream gives it). */
  readonly xid: number;
  readonly via: 'table' | 'wal';
  /** `id` is the row id (table mode) or `wal:<lsn>` (WAL mode: no row). */
  readonly message: OutboxMessage;
  readonly key: string;
  readonly partition: number;
  /**
   * Table mode: pending, never attempted, due at its commit (no later `deliverAfter`); else the
   * polling path's. WAL mode: always.
   */
  readonly publishable: boolean;
  /** WAL mode: the decoded message, for a handover into the table. */
  readonly wal?: WalEvent;
  /**
   * An authenticated WAL-mode message this relay cannot publish (another format version, not what
   * `enqueue` writes): it goes into the table as a dead event of its own aggregate, its content as
   * the payload, for `dead list`. (A message that is not authenticated never becomes an event:
   * src/cdc/wal-auth.ts.)
   */
  readonly undecodable?: string;
}

/** The aggregate type of the dead rows that keep undecodable WAL-mode messages. */
export const UNDECODABLE_TYPE = 'tx-outbox.undecodable';

function undecodableEvent(content: Buffer, lsn: Lsn): WalEvent {
  return {
    eventId: randomUUID(),
    aggregateType: UNDECODABLE_TYPE,
    aggregateId: formatLsn(lsn),
    sequence: 1,
    sequenceBase: 0,
    callerVersion: false,
    partition: 0,
    type: UNDECODABLE_TYPE,
    schemaVersion: 1,
    topic: null,
    payload: Buffer.from(content),
    contentType: 'application/octet-stream',
    headers: {},
    createdAt: new Date(),
  };
}

/** A WAL-mode message kept as a dead event of its own aggregate (see {@link StreamEvent.undecodable}). */
function undecodable(unit: AckUnit, xid: number, content: Buffer, lsn: Lsn, reason: string): StreamEvent {
  const event = undecodableEvent(content, lsn);
  return {
    unit,
    xid,
    via: 'wal',
    message: walMessage(event, lsn),
    key: aggregateKeyOf(event.aggregateType, event.aggregateId),
    partition: event.partition,
    publishable: false,
    wal: event,
    undecodable: reason,
  };
}

/**
 * The prefix of the transactional message in every handover transaction: the stream skips that
 * transaction's inserts even when it does not know its id (another process, after a restart).
 * Its content is the transaction's own id (`pg_current_xact_id()`, written by the statement), so
 * that a look-alike message of an application does not make its transaction look like the relay's.
 */
export function handoverPrefix(schema: string): string {
  return `tx-outbox:${schema}:handover`;
}

/**
 * Whether a handover marker's content names the transaction it came in: the xid8 text
 * `pg_current_xact_id()` gives, whose low 32 bits are the stream's `xid`.
 */
export function isOwnMarker(content: Buffer, xid: number): boolean {
  if (content.length === 0 || content.length > 20) return false;
  const text = content.toString('latin1');
  if (!/^[0-9]+$/.test(text)) return false;
  return Number(BigInt(text) & 0xffffffffn) === xid;
}

/** Transactions this relay wrote itself (its handover inserts): their 32-bit xids, the last few thousand. */
export class OwnTransactions {
  readonly #xids = new Set<number>();

  /** `xid8` as pg_current_xact_id() gives it. */
  add(xid8: string): void {
    this.#xids.add(Number(BigInt(xid8) & 0xffffffffn));
    if (this.#xids.size > 10_000) {
      const oldest = this.#xids.values().next().value;
      if (oldest !== undefined) this.#xids.delete(oldest);
    }
  }

  has(xid: number): boolean {
    return this.#xids.has(xid);
  }
}

function text(values: ReadonlyMap<string, string | null>, column: string): string {
  return values.get(column) ?? '';
}

/** A streamed insert into `<schema>.events`: the row, with what decides whether the stream publishes it. */
export function insertedRow(
  columns: readonly string[],
  values: readonly (string | null)[],
): EventRow & { partition: number; status: string } {
  const v = new Map<string, string | null>();
  for (let i = 0; i < columns.length; i++) v.set(columns[i]!, values[i] ?? null);
  const bytes = v.get('payload_bytes');
  const deliverAfter = v.get('deliver_after');
  return {
    id: text(v, 'id'),
    event_id: text(v, 'event_id'),
    partition: Number(text(v, 'partition')),
    aggregate_type: text(v, 'aggregate_type'),
    aggregate_id: text(v, 'aggregate_id'),
    sequence: text(v, 'sequence'),
    sequence_base: v.get('sequence_base') ?? '0',
    event_type: text(v, 'event_type'),
    schema_version: Number(v.get('schema_version') ?? 1),
    topic: v.get('topic') ?? null,
    payload: v.get('payload') ?? null,
    // bytea in text format: \x followed by hex.
    payload_bytes: bytes ? Buffer.from(bytes.slice(2), 'hex') : null,
    headers: v.get('headers') ?? '{}',
    created_at: parseTimestamptz(text(v, 'created_at')),
    deliver_after: deliverAfter ? parseTimestamptz(deliverAfter) : null,
    attempts: Number(v.get('attempts') ?? 0),
    status: v.get('status') ?? 'pending',
  };
}

/** A WAL-mode event as a publisher's message. */
export function walMessage(event: WalEvent, lsn: Lsn): OutboxMessage {
  return {
    id: `wal:${formatLsn(lsn)}`,
    eventId: event.eventId,
    aggregateType: event.aggregateType,
    aggregateId: event.aggregateId,
    sequence: event.sequence,
    ...(event.sequenceBase > 0 ? { sequenceBase: event.sequenceBase } : {}),
    type: event.type,
    schemaVersion: event.schemaVersion,
    topic: event.topic,
    payload: event.payload,
    contentType: event.contentType,
    headers: event.headers,
    createdAt: event.createdAt,
    attempts: 0,
  };
}

interface OpenTransaction {
  readonly xid: number;
  readonly commitTime: Date;
  /** A handover marker naming this transaction came by. */
  own: boolean;
  /** A message with the events prefix came by: no handover transaction carries one. */
  walEvents: boolean;
  readonly events: StreamEvent[];
  readonly unit: AckUnit;
}

/**
 * Groups streamed changes into units (one per transaction, one per non-transactional message)
 * in the {@link AckTracker}, and hands out the events of each transaction once its commit came
 * by, in commit order. A unit without events (a heartbeat, another prefix, the relay's own
 * handover insert, messages the reader refused) is settled at once.
 */
export class StreamBatcher {
  #txn: OpenTransaction | undefined;
  private readonly handoverPrefix: string;

  constructor(
    private readonly schema: string,
    private readonly eventPrefix: string,
    private readonly tracker: AckTracker,
    private readonly own: OwnTransactions,
    private readonly reader: WalMessageReader,
  ) {
    this.handoverPrefix = handoverPrefix(schema);
  }

  /** The events of the transactions these changes committed. */
  add(changes: readonly StreamChange[]): StreamEvent[] {
    const out: StreamEvent[] = [];
    for (const { lsn, message: m } of changes) {
      switch (m.tag) {
        case 'begin':
          this.#txn = {
            xid: m.xid,
            commitTime: m.commitTime,
            own: false,
            walEvents: false,
            events: [],
            unit: this.tracker.open('transaction'),
          };
          break;
        case 'commit': {
          const txn = this.#txn;
          this.#txn = undefined;
          if (!txn) break;
          const own = !txn.walEvents && (txn.own || this.own.has(txn.xid));
          const events = own ? [] : txn.events;
          txn.unit.expect(events.length);
          txn.unit.close(m.endLsn, m.commitTime);
          out.push(...events);
          break;
        }
        case 'insert': {
          const txn = this.#txn;
          if (!txn || m.schema !== this.schema || m.table !== 'events') break;
          const row = insertedRow(m.columns, m.values);
          const message = toMessage(row);
          txn.events.push({
            unit: txn.unit,
            xid: txn.xid,
            via: 'table',
            message,
            key: aggregateKeyOf(row.aggregate_type, row.aggregate_id),
            partition: row.partition,
            publishable:
              row.status === 'pending' &&
              row.attempts === 0 &&
              (row.deliver_after === null || row.deliver_after.getTime() <= txn.commitTime.getTime()),
          });
          break;
        }
        case 'message': {
          const at = m.lsn || lsn;
          if (!m.transactional) {
            // A heartbeat, or a non-transactional message of another prefix: a unit of its own.
            const unit = this.tracker.open('message');
            if (m.prefix === this.eventPrefix) {
              // Not undone by a rollback, and outside any transaction's order: never an event.
              // Authenticated, it is kept dead (the reader says so); else refused.
              const reading = this.reader.read(m.content, at, false);
              if (reading.kind === 'dead') {
                unit.expect(1);
                out.push(undecodable(unit, 0, reading.content, at, reading.problem));
              }
            }
            unit.close(m.lsn);
            break;
          }
          const txn = this.#txn;
          if (!txn) break;
          if (m.prefix === this.handoverPrefix) {
            if (isOwnMarker(m.content, txn.xid)) txn.own = true;
            break;
          }
          if (m.prefix !== this.eventPrefix) break;
          txn.walEvents = true;
          const reading = this.reader.read(m.content, at, true);
          if (reading.kind === 'refused') break;
          if (reading.kind === 'dead') {
            txn.events.push(undecodable(txn.unit, txn.xid, reading.content, at, reading.problem));
            break;
          }
          const event = reading.event;
          txn.events.push({
            unit: txn.unit,
            xid: txn.xid,
            via: 'wal',
            message: walMessage(event, at),
            key: aggregateKeyOf(event.aggregateType, event.aggregateId),
            partition: event.partition,
            publishable: true,
            wal: event,
          });
          break;
        }
        default:
          break;
      }
    }
    return out;
  }
}
