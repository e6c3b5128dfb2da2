/**
 * Reading a batched-mode webhook request (CloudEvents HTTP binding §3.3,
 * `application/cloudevents-batch+json`): a JSON array of events in the JSON event format,
 * as `webhookPublisher` sends with `batch` — attributes as plain strings, the payload as
 * `data` (JSON) or `data_base64` (bytes). 0.1 wrote the same layout with a plain `sequence`
 * and no `aggregatesequence`; `fromEnvelope` reads both. The whole body is signed, so every
 * attribute of every element is. A JSON payload arrives as the same JSON value, serialised
 * again (`JSON.stringify`), not as the stored bytes a binary-mode body carries.
 */
import { structuredHeaders } from '../envelope/read.js';
import { OutboxValidationError } from '../errors.js';
import { fromEnvelope, type InboxMessage } from '../inbox/message.js';
import { BATCH_CONTENT_TYPE } from '../publishers/webhook/request.js';

/** Refuses bytes that are not UTF-8 rather than reading U+FFFD into an attribute. */
const utf8 = new TextDecoder('utf-8', { fatal: true });
/** The attributes an event cannot do without (one of each group), named as the error says. */
const REQUIRED: ReadonlyArray<readonly string[]> = [
  ['id'],
  ['type'],
  ['aggregatetype'],
  ['aggregateid'],
  ['aggregatesequence', 'sequence'],
];
/** JSON and `+json` media types: their `data` is the JSON value itself. */
const JSON_TYPE = /^application\/(?:[^;\s]*\+)?json(?:\s*;|$)/i;

/** Whether the (signed) content type says the body is a batch. */
export function isBatch(contentType: string): boolean {
  return contentType.toLowerCase().startsWith(BATCH_CONTENT_TYPE);
}

/**
 * The events of a batch body, in order. Throws an `OutboxValidationError` naming the element
 * (`batch[2].id` …) when the body is not a JSON array of tx-outbox events: a batch is taken
 * whole or not at all.
 */
export function readBatch(body: Uint8Array): InboxMessage[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(utf8.decode(body));
  } catch (error) {
    throw new OutboxValidationError(
      'batch',
      `is not UTF-8 JSON (${(error as Error).message})`,
      'Send a JSON array of CloudEvents.',
    );
  }
  if (!Array.isArray(parsed)) {
    throw new OutboxValidationError('batch', 'is not a JSON array', 'Send a JSON array of CloudEvents.');
  }
  return parsed.map((element, index) => batchEvent(element, index));
}

function batchEvent(element: unknown, index: number): InboxMessage {
  const field = `batch[${index}]`;
  if (typeof element !== 'object' || element === null || Array.isArray(element)) {
    throw new OutboxValidationError(field, 'is not a JSON object', 'Send each event as a JSON object.');
  }
  const members = element as Record<string, unknown>;
  const attributes = structuredHeaders(members);
  for (const required of REQUIRED) {
    if (!required.some((name) => attributes[name] !== undefined && attributes[name] !== '')) {
      throw new OutboxValidationError(
        `${field}.${required[0]}`,
        'is missing',
        'The event was not published by tx-outbox (or its envelope was stripped on the way).',
      );
    }
  }
  const payload = payloadOf(members, attributes['datacontenttype'], field);
  try {
    // Every name is unprefixed, so fromEnvelope reads them as the MQTT 5 / Redis layout: as they are.
    return fromEnvelope(attributes, payload);
  } catch (error) {
    if (!(error instanceof OutboxValidationError)) throw error;
    throw new OutboxValidationError(
      field,
      `is not a tx-outbox event (${error.message})`,
      'Check the sender.',
    );
  }
}

/** The payload bytes: `data_base64` decoded, JSON `data` serialised, text `data` as UTF-8; none: empty. */
function payloadOf(
  members: Record<string, unknown>,
  contentType: string | undefined,
  field: string,
): Uint8Array {
  const base64 = members['data_base64'];
  if (base64 !== undefined) {
    if (typeof base64 !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(base64)) {
      throw new OutboxValidationError(`${field}.data_base64`, 'is not base64', 'Check the sender.');
    }
    return Buffer.from(base64, 'base64');
  }
  if (!('data' in members)) return new Uint8Array(0);
  const data = members['data'];
  if (typeof data === 'string' && contentType !== undefined && !JSON_TYPE.test(contentType)) {
    return Buffer.from(data, 'utf8');
  }
  return Buffer.from(JSON.stringify(data), 'utf8');
}
