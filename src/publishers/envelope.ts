import type { OutboxMessage } from './contract.js';

/**
 * The CloudEvents-style envelope every broker carries in its headers, so a
 * consumer can dedup, order and route without parsing the payload.
 */
export function envelopeHeaders(message: OutboxMessage, source: string): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [key, value] of Object.entries(message.headers)) headers[key] = value;
  headers['ce-specversion'] = '1.0';
  headers['ce-id'] = message.eventId;
  headers['ce-type'] = message.type;
  headers['ce-source'] = source;
  headers['ce-time'] = message.createdAt.toISOString();
  headers['ce-subject'] = message.aggregateId;
  headers['ce-datacontenttype'] = message.contentType;
  headers['ce-aggregatetype'] = message.aggregateType;
  headers['ce-aggregateid'] = message.aggregateId;
  headers['ce-sequence'] = String(message.sequence);
  headers['ce-schemaversion'] = String(message.schemaVersion);
  return headers;
}
