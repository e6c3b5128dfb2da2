import { OutboxValidationError } from '../errors.js';

/** An event as a consumer receives it: the envelope plus the payload bytes. */
export interface InboxMessage {
  readonly eventId: string;
  readonly type: string;
  readonly aggregateType: string;
  readonly aggregateId: string;
  readonly sequence: number;
  readonly schemaVersion: number;
  readonly payload: Uint8Array;
  readonly headers: Readonly<Record<string, string>>;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Reads the envelope every tx-outbox publisher sends (CloudEvents `ce-*` headers or
 * properties) into an InboxMessage. A message without it cannot be deduplicated or
 * ordered: the error names the missing header.
 */
export function fromEnvelope(
  headers: Readonly<Record<string, string | undefined>>,
  payload: Uint8Array,
): InboxMessage {
  const get = (name: string): string => {
    const value = headers[name];
    if (value === undefined || value === '') {
      throw new OutboxValidationError(
        `headers.${name}`,
        'is missing',
        'The message was not published by tx-outbox (or its envelope was stripped on the way).',
      );
    }
    return value;
  };
  const eventId = get('ce-id');
  if (!UUID.test(eventId))
    throw new OutboxValidationError('headers.ce-id', `"${eventId}" is not a UUID`, 'Pass event ids.');
  const sequence = Number(get('ce-sequence'));
  const schemaVersion = Number(headers['ce-schemaversion'] ?? '1');
  if (!Number.isSafeInteger(sequence) || sequence < 1) {
    throw new OutboxValidationError(
      'headers.ce-sequence',
      'is not a positive integer',
      'Check the publisher.',
    );
  }
  const clean: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) if (v !== undefined) clean[k] = v;
  return {
    eventId: eventId.toLowerCase(),
    type: get('ce-type'),
    aggregateType: get('ce-aggregatetype'),
    aggregateId: get('ce-aggregateid'),
    sequence,
    schemaVersion: Number.isSafeInteger(schemaVersion) ? schemaVersion : 1,
    payload,
    headers: clean,
  };
}
