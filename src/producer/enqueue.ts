import { OutboxError, OutboxValidationError } from '../errors.js';
import type { Logger } from '../logger.js';
import { quoteSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import { namedStatement, type Statement } from '../schema/statement.js';
import { type BackpressureMode, backpressureGate } from './backpressure.js';
import { enqueueStatements, wakeChannel } from './enqueue-sql.js';
import { walStatements } from './enqueue-wal-sql.js';
import {
  DEFAULT_MAX_PAYLOAD_BYTES,
  MAX_BATCH_BYTES_LIMIT,
  type OutboxEvent,
  type PreparedEvent,
  prepareEvent,
} from './event.js';
import { newEventId } from './event-id.js';
import { assertInTransaction, type SqlExecutor, sendInTransaction } from './executor.js';
import { activeTraceHeaders, activeTraceHeadersNow } from './trace.js';
import { encodeWalBody } from './wal-message.js';
import { walSlotGate, walSlotName } from './wal-slot.js';

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
  /**
   * Where the events go. `'table'` (default): rows of `<schema>.events`, for any relay. `'wal'`:
   * WAL messages only (`pg_logical_emit_message`, transactional), for the CDC relay — no events
   * row, nothing to delete; the sequences are the table mode's. Refused for `deliverAfter`, and
   * (TXO_CDC_NO_SLOT, TXO_CDC_WAL_LEVEL) without a slot that decodes them: checked once per 5 s.
   * `notify` does not apply.
   */
  readonly via?: 'table' | 'wal';
  /**
   * With `via: 'wal'`: the CDC relay's replication slot. Default: the schema's default slot in the
   * transaction's database, as the CDC relay resolves it (`txo_<database>_<schema>_<hash>`, docs/cdc.md).
   */
  readonly slot?: string;
}

export interface EnqueueResult {
  readonly eventId: string;
  readonly sequence: number;
}

interface Statements {
  readonly one: Statement;
  readonly oneKnown: Statement;
  readonly many: Statement;
  readonly oneVersioned: Statement;
  readonly manyVersioned: Statement;
}

/** Per schema, then per (notify, prepared): four variants each, looked up without building a key. */
const statements = new Map<string, Statements[]>();

function statementsFor(schema: string, notify: boolean, prepared: boolean): Statements {
  let variants = statements.get(schema);
  if (!variants) {
    variants = [];
    statements.set(schema, variants);
  }
  const slot = (notify ? 2 : 0) + (prepared ? 1 : 0);
  let found = variants[slot];
  if (!found) {
    const sql = enqueueStatements(quoteSchema(schema), notify ? wakeChannel(schema) : null);
    found = {
      one: namedStatement('txo_enqueue', sql.one, prepared),
      oneKnown: namedStatement('txo_enqueue_known', sql.oneKnown, prepared),
      many: namedStatement('txo_enqueue', sql.many, prepared),
      oneVersioned: namedStatement('txo_enqueue', sql.oneVersioned, prepared),
      manyVersioned: namedStatement('txo_enqueue', sql.manyVersioned, prepared),
    };
    variants[slot] = found;
  }
  return found;
}

/** Per schema: the WAL statements, unprepared [0] and prepared [1]. */
const walVariants = new Map<string, Statements[]>();

function walStatementsFor(schema: string, prepared: boolean): Statements {
  let variants = walVariants.get(schema);
  if (!variants) {
    variants = [];
    walVariants.set(schema, variants);
  }
  const index = prepared ? 1 : 0;
  let found = variants[index];
  if (!found) {
    const sql = walStatements(schema, quoteSchema(schema));
    found = {
      one: namedStatement('txo_enqueue_wal', sql.one, prepared),
      oneKnown: namedStatement('txo_enqueue_wal_known', sql.oneKnown, prepared),
      many: namedStatement('txo_enqueue_wal', sql.many, prepared),
      oneVersioned: namedStatement('txo_enqueue_wal', sql.oneVersioned, prepared),
      manyVersioned: namedStatement('txo_enqueue_wal', sql.manyVersioned, prepared),
    };
    variants[index] = found;
  }
  return found;
}

export const MAX_BATCH = 10_000;
export const DEFAULT_MAX_BATCH_BYTES = 64 * 1024 * 1024;

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
  const via = options.via ?? 'table';
  if (via !== 'table' && via !== 'wal') {
    throw new OutboxValidationError('via', `is ${String(via)}`, "Pass 'table' or 'wal'.");
  }
  const wal = via === 'wal';
  const slot = wal || options.slot !== undefined ? walSlotName(schema, options.slot) : undefined;
  const sql = wal
    ? walStatementsFor(schema, prepareStatements)
    : statementsFor(schema, options.notify ?? true, prepareStatements);
  assertInTransaction(tx);
  if (events.length === 0) return [];

  const traceHeaders = activeTraceHeadersNow() ?? (await activeTraceHeaders());
  if (single) {
    const p = prepareEvent(input as OutboxEvent, 'event', { maxPayloadBytes, newEventId, traceHeaders });
    if (wal) refuseScheduled(p, 'event');
    if (p.bytes > maxBatchBytes) {
      throw new OutboxValidationError(
        'event',
        `takes ${p.bytes} bytes of payload and headers, over maxBatchBytes (${maxBatchBytes})`,
        'Split the batch into smaller enqueue calls, or raise maxBatchBytes.',
      );
    }
    if (maxPending !== undefined)
      await checkBackpressure(tx, schema, maxPending, onBackpressure, prepareStatements, options);
    if (wal) await walSlotGate.check(tx, schema, slot, prepareStatements);
    return insertOne(tx, sql, p, wal);
  }
  const prepared: PreparedEvent[] = [];
  const seen = new Set<string>();
  const versions = new VersionRun();
  let bytes = 0;
  for (let i = 0; i < events.length; i++) {
    const field = `events[${i}]`;
    const p = prepareEvent(events[i]!, field, { maxPayloadBytes, newEventId, traceHeaders });
    if (wal) refuseScheduled(p, field);
    bytes += p.bytes;
    if (bytes > maxBatchBytes) {
      throw new OutboxValidationError(
        'events',
        `total ${bytes} bytes of payloads and headers by ${field}, over maxBatchBytes (${maxBatchBytes})`,
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
    versions.check(p, field);
    prepared.push(p);
  }
  if (maxPending !== undefined)
    await checkBackpressure(tx, schema, maxPending, onBackpressure, prepareStatements, options);
  if (wal) await walSlotGate.check(tx, schema, slot, prepareStatements);

  const assigned = versions.any ? prepared.filter((p) => p.sequence === null) : prepared;
  const versioned = versions.any ? prepared.filter((p) => p.sequence !== null) : [];
  const sequences = new Map<string, number>();
  if (assigned.length === 1) {
    const r = await insertOne(tx, sql, assigned[0]!, wal);
    sequences.set(r.eventId, r.sequence);
  } else if (assigned.length > 1) {
    if (wal) await emitMany(tx, sql.many, assigned, sequences);
    else await insertMany(tx, sql.many, columns(assigned), sequences);
  }
  if (versioned.length === 1) {
    const r = await insertOne(tx, sql, versioned[0]!, wal);
    sequences.set(r.eventId, r.sequence);
  } else if (versioned.length > 1) {
    if (wal) {
      const values = walColumns(versioned);
      values.push(versioned.map((e) => e.sequence));
      await run(tx, sql.manyVersioned, values);
      for (const p of versioned) sequences.set(p.eventId, p.sequence!);
    } else {
      const values = columns(versioned);
      values.push(versioned.map((e) => e.sequence));
      await insertMany(tx, sql.manyVersioned, values, sequences);
    }
  }
  return prepared.map((p) => ({ eventId: p.eventId, sequence: sequences.get(p.eventId) ?? 0 }));
}

function checkBackpressure(
  tx: SqlExecutor,
  schema: string,
  maxPending: number,
  mode: BackpressureMode,
  prepared: boolean,
  options: EnqueueOptions,
): Promise<void> {
  return backpressureGate.check(tx, { schema, maxPending, mode, prepared, logger: options.logger });
}

/** WAL mode has no deliverAfter: nothing in the stream can wait, and the table can. */
function refuseScheduled(p: PreparedEvent, field: string): void {
  if (p.deliverAfter === null) return;
  throw new OutboxValidationError(
    `${field}.deliverAfter`,
    "is set, and a WAL-mode event (via: 'wal') is published as it streams by: it cannot wait",
    "Use the table for scheduled events: enqueue them without via: 'wal'.",
  );
}

async function insertOne(
  tx: SqlExecutor,
  sql: Statements,
  p: PreparedEvent,
  wal: boolean,
): Promise<EnqueueResult> {
  const values = wal ? [encodeWalBody(p), p.aggregateType, p.aggregateId] : scalars(p);
  if (p.sequence !== null) {
    values.push(p.sequence);
    await run(tx, sql.oneVersioned, values);
    return { eventId: p.eventId, sequence: p.sequence };
  }
  const key = `${p.aggregateType}\u001f${p.aggregateId}`;
  if (knownAggregates.has(key)) {
    const { rows } = await run<{ sequence: string }>(tx, sql.oneKnown, values);
    if (rows.length > 0) return { eventId: p.eventId, sequence: Number(rows[0]!.sequence) };
    knownAggregates.delete(key); // pruned since: INSERT_ONE inserts its row above the floor
  }
  const { rows } = await run<{ sequence: string }>(tx, sql.one, values);
  knownAggregates.add(key);
  return { eventId: p.eventId, sequence: Number(rows[0]?.sequence ?? 0) };
}

/**
 * Aggregates this process gave a sequence to, most recent last: a hint only (a wrong one costs one
 * statement that writes nothing), so one set for every schema and database, bounded.
 */
class KnownAggregates {
  readonly #keys = new Set<string>();
  constructor(private readonly max: number) {}
  has(key: string): boolean {
    return this.#keys.has(key);
  }
  add(key: string): void {
    if (this.#keys.size >= this.max) {
      const oldest = this.#keys.values().next().value;
      if (oldest !== undefined) this.#keys.delete(oldest);
    }
    this.#keys.add(key);
  }
  delete(key: string): void {
    this.#keys.delete(key);
  }
}
const knownAggregates = new KnownAggregates(20_000);

/** Runs one of the statements; a schema from before migration 9 is named as such, not as 42883. */
async function run<R extends object>(
  tx: SqlExecutor,
  statement: Statement,
  values: unknown[],
): Promise<{ rows: R[] }> {
  try {
    return await sendInTransaction<R>(tx, { text: statement.text, name: statement.name, values });
  } catch (error) {
    throw schemaError(error) ?? error;
  }
}

/** What a statement's error means when it is the schema's (too old, or a grant missing), else undefined. */
function schemaError(error: unknown): OutboxError | undefined {
  const text = error instanceof Error ? error.message : '';
  const missing = /\b(partition_of)\(.*\) does not exist/.exec(text);
  if (missing) {
    return new OutboxError(
      `the outbox schema has no ${missing[1]}() (migration 9): it is older than this version of tx-outbox; ` +
        'run tx-outbox migrate (or migrate()) before enqueueing',
      { code: 'TXO_SCHEMA_OUTDATED', cause: error },
    );
  }
  // WAL mode (migration 12): the key table, readable by the producer's role only.
  if (/relation ".*\.?wal_key" does not exist|wal_key_missing\(\) does not exist/.test(text)) {
    return new OutboxError(
      "the outbox schema has no wal_key table (migration 12), which via: 'wal' needs to authenticate its events; " +
        'run tx-outbox migrate (or migrate()) before enqueueing',
      { code: 'TXO_SCHEMA_OUTDATED', cause: error },
    );
  }
  if (/permission denied for (table wal_key|function wal_key_missing)/.test(text)) {
    return new OutboxError(
      "the database role may not read the outbox schema's wal_key table, which via: 'wal' needs to authenticate " +
        'its events (only the producer and relay roles may); re-run the grants of `tx-outbox roles --print-sql`',
      { code: 'TXO_NO_PRIVILEGE', cause: error },
    );
  }
  return undefined;
}

async function insertMany(
  tx: SqlExecutor,
  statement: Statement,
  values: unknown[],
  into: Map<string, number>,
): Promise<void> {
  const { rows } = await run<{ event_id: string; sequence: string }>(tx, statement, values);
  for (const r of rows) into.set(r.event_id, Number(r.sequence));
}

/**
 * Caller versions within one call: every event of an aggregate carries one or none does, and
 * those that do rise by exactly one, in the order given. (Across calls nothing is read: the relay
 * makes a repeat or a gap safe and visible, docs/guarantees.md.)
 */
class VersionRun {
  any = false;
  readonly #last = new Map<string, { sequence: number | null; field: string }>();

  check(p: PreparedEvent, field: string): void {
    if (p.sequence !== null) this.any = true;
    const key = `${p.aggregateType}\u001f${p.aggregateId}`;
    const before = this.#last.get(key);
    this.#last.set(key, { sequence: p.sequence, field });
    if (!before) return;
    const aggregate = `aggregate ${p.aggregateType}/${p.aggregateId}`;
    if ((before.sequence === null) !== (p.sequence === null)) {
      throw new OutboxValidationError(
        `${field}.sequence`,
        p.sequence === null
          ? `is missing, but ${before.field} of ${aggregate} carries one`
          : `is given, but ${before.field} of ${aggregate} has none`,
        "Give every event of an aggregate its version, or none (one aggregate can't mix caller versions and assigned sequences).",
      );
    }
    if (p.sequence !== null && p.sequence !== before.sequence! + 1) {
      throw new OutboxValidationError(
        `${field}.sequence`,
        `is ${p.sequence} after ${before.sequence} (${before.field}) of ${aggregate}`,
        `Caller versions rise by exactly one per event: pass ${before.sequence! + 1}.`,
      );
    }
  }
}

/** A WAL batch: one row back per event, in the order given. */
async function emitMany(
  tx: SqlExecutor,
  statement: Statement,
  events: readonly PreparedEvent[],
  into: Map<string, number>,
): Promise<void> {
  const { rows } = await run<{ sequence: string }>(tx, statement, walColumns(events));
  if (rows.length !== events.length) {
    throw new OutboxError(
      `the WAL-mode batch statement returned ${rows.length} rows for ${events.length} events`,
      {
        code: 'TXO_INTERNAL',
      },
    );
  }
  for (let i = 0; i < events.length; i++) into.set(events[i]!.eventId, Number(rows[i]!.sequence));
}

function walColumns(events: readonly PreparedEvent[]): unknown[] {
  return [events.map(encodeWalBody), events.map((e) => e.aggregateType), events.map((e) => e.aggregateId)];
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
