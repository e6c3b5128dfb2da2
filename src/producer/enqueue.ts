import { v7 as uuidv7 } from 'uuid';
import { OutboxValidationError } from '../errors.js';
import type { Logger } from '../logger.js';
import { quoteSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import { namedStatement, type Statement } from '../schema/statement.js';
import { type BackpressureMode, backpressureGate } from './backpressure.js';
import { enqueueStatements, wakeChannel } from './enqueue-sql.js';
import { DEFAULT_MAX_PAYLOAD_BYTES, type OutboxEvent, type PreparedEvent, prepareEvent } from './event.js';
import { assertInTransaction } from './executor.js';
import { activeTraceHeaders } from './trace.js';

export interface EnqueueOptions {
  /** Outbox schema. Default `outbox`. */
  readonly schema?: string;
  /** Wake idle relays with one NOTIFY per transaction. Default true. See docs/performance.md for its cost. */
  readonly notify?: boolean;
  /** Largest payload accepted, in bytes (serialised JSON or raw bytes). Default 1 MiB. */
  readonly maxPayloadBytes?: number;
  /**
   * Largest total of one call's payloads and headers, in bytes. Default 64 MiB, at most 128 MiB:
   * the statement carries a batch as text arrays of about twice its size.
   */
  readonly maxBatchBytes?: number;
  /** Use a named prepared statement (default true). Turn off behind PgBouncer in transaction mode. */
  readonly prepared?: boolean;
  /**
   * Backpressure ceiling: once the outbox holds about this many pending events, `enqueue`
   * throws `OutboxBackpressureError` (or warns, see `onBackpressure`) before writing anything.
   * The figure is the one the relays publish every few seconds, read at most once a second per
   * schema per process; without a running relay, PostgreSQL's live-row estimate. Default: none.
   */
  readonly maxPending?: number;
  /** Above `maxPending`: `'throw'` (default) refuses; `'warn'` logs at most every 10 s and writes. */
  readonly onBackpressure?: BackpressureMode;
  /** Where `onBackpressure: 'warn'` logs; without one, a process warning (code TXO_BACKPRESSURE). */
  readonly logger?: Logger;
}

export interface EnqueueResult {
  readonly eventId: string;
  readonly sequence: number;
}

interface Statements {
  readonly one: Statement;
  readonly many: Statement;
}

const statements = new Map<string, Statements>();

function statementsFor(schema: string, notify: boolean, prepared: boolean): Statements {
  const key = `${schema}\u0000${notify}\u0000${prepared}`;
  let found = statements.get(key);
  if (!found) {
    const sql = enqueueStatements(quoteSchema(schema), notify ? wakeChannel(schema) : null);
    found = {
      one: namedStatement('txo_enqueue', sql.one, prepared),
      many: namedStatement('txo_enqueue', sql.many, prepared),
    };
    statements.set(key, found);
  }
  return found;
}

export const MAX_BATCH = 10_000;
export const DEFAULT_MAX_BATCH_BYTES = 64 * 1024 * 1024;
const MAX_BATCH_BYTES_LIMIT = 128 * 1024 * 1024;

function positiveInteger(value: unknown, field: string, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? 'a positive integer' : `an integer from 1 to ${max}`;
    throw new OutboxValidationError(field, `is ${String(value)}`, `Pass ${range}.`);
  }
  return value;
}

/**
 * Writes events into the outbox on the caller's transaction handle, in one
 * round trip. Validates everything first: on bad input it throws an
 * OutboxValidationError naming the field, and writes nothing.
 */
export async function enqueue(
  tx: unknown,
  event: OutboxEvent,
  options?: EnqueueOptions,
): Promise<EnqueueResult>;
export async function enqueue(
  tx: unknown,
  events: readonly OutboxEvent[],
  options?: EnqueueOptions,
): Promise<EnqueueResult[]>;
export async function enqueue(
  tx: unknown,
  input: OutboxEvent | readonly OutboxEvent[],
  options: EnqueueOptions = {},
): Promise<EnqueueResult | EnqueueResult[]> {
  const single = !Array.isArray(input);
  const events = single ? [input as OutboxEvent] : (input as readonly OutboxEvent[]);
  const maxPayloadBytes = positiveInteger(
    options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES,
    'maxPayloadBytes',
  );
  const maxBatchBytes = positiveInteger(
    options.maxBatchBytes ?? DEFAULT_MAX_BATCH_BYTES,
    'maxBatchBytes',
    MAX_BATCH_BYTES_LIMIT,
  );
  if (events.length > MAX_BATCH) {
    throw new OutboxValidationError(
      'events',
      `holds ${events.length} events`,
      `Split it into batches of ${MAX_BATCH}.`,
    );
  }
  const maxPending =
    options.maxPending === undefined ? undefined : positiveInteger(options.maxPending, 'maxPending');
  const onBackpressure = options.onBackpressure ?? 'throw';
  if (onBackpressure !== 'throw' && onBackpressure !== 'warn') {
    throw new OutboxValidationError(
      'onBackpressure',
      `is ${String(onBackpressure)}`,
      "Pass 'throw' or 'warn'.",
    );
  }
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const prepareStatements = options.prepared ?? true;
  const sql = statementsFor(schema, options.notify ?? true, prepareStatements);
  assertInTransaction(tx);
  if (events.length === 0) return [];

  const traceHeaders = await activeTraceHeaders();
  const prepared: PreparedEvent[] = [];
  const seen = new Set<string>();
  let bytes = 0;
  for (let i = 0; i < events.length; i++) {
    const field = single ? 'event' : `events[${i}]`;
    const p = prepareEvent(events[i]!, field, { maxPayloadBytes, newEventId: uuidv7, traceHeaders });
    bytes += p.bytes;
    if (bytes > maxBatchBytes) {
      throw new OutboxValidationError(
        single ? 'event' : 'events',
        single
          ? `takes ${bytes} bytes of payload and headers, over maxBatchBytes (${maxBatchBytes})`
          : `total ${bytes} bytes of payloads and headers by ${field}, over maxBatchBytes (${maxBatchBytes})`,
        'Split the batch into smaller enqueue calls, or raise maxBatchBytes.',
      );
    }
    if (seen.has(p.eventId)) {
      throw new OutboxValidationError(
        `${field}.eventId`,
        `repeats ${p.eventId} within the batch`,
        'Event ids are unique.',
      );
    }
    seen.add(p.eventId);
    prepared.push(p);
  }
  if (maxPending !== undefined) {
    await backpressureGate.check(tx, {
      schema,
      maxPending,
      mode: onBackpressure,
      prepared: prepareStatements,
      logger: options.logger,
    });
  }

  if (prepared.length === 1) {
    const p = prepared[0]!;
    const { rows } = await tx.query<{ sequence: string }>({ ...sql.one, values: scalars(p) });
    const result = { eventId: p.eventId, sequence: Number(rows[0]?.sequence ?? 0) };
    return single ? result : [result];
  }
  const { rows } = await tx.query<{ event_id: string; sequence: string }>({
    ...sql.many,
    values: columns(prepared),
  });
  const sequences = new Map(rows.map((r) => [r.event_id, Number(r.sequence)]));
  return prepared.map((p) => ({ eventId: p.eventId, sequence: sequences.get(p.eventId) ?? 0 }));
}

function scalars(e: PreparedEvent): unknown[] {
  return [
    e.eventId,
    e.aggregateType,
    e.aggregateId,
    e.type,
    e.schemaVersion,
    e.topic,
    e.payloadJson,
    e.payloadBytes,
    e.headers,
    e.deliverAfter,
  ];
}

function columns(events: readonly PreparedEvent[]): unknown[] {
  return [
    events.map((e) => e.eventId),
    events.map((e) => e.aggregateType),
    events.map((e) => e.aggregateId),
    events.map((e) => e.type),
    events.map((e) => e.schemaVersion),
    events.map((e) => e.topic),
    events.map((e) => e.payloadJson),
    events.map((e) => e.payloadBytes),
    events.map((e) => e.headers),
    events.map((e) => e.deliverAfter),
  ];
}
