/**
 * Envelopes for contract tests: the awkward values every binding must carry byte for byte, and
 * the envelope tx-outbox 0.1 wrote (`ce-*` names with the values as they are, a plain
 * `ce-sequence`, on every transport), which consumers must keep reading during a rolling
 * upgrade.
 */
import type { OutboxMessage } from '../publishers/contract.js';

/**
 * Aggregate ids that stress every binding: spaces at either end, `%` and what looks like
 * percent-encoding, quotes, non-ASCII, a BOM, the longest id.
 */
export const AWKWARD_IDS: readonly string[] = [
  ' leading space',
  'trailing space ',
  '  both  ',
  '50%off',
  '%41%42',
  'a"quoted"id',
  "it's",
  'café',
  '日本語-キー',
  '😀 emoji',
  '\u00a0no-break\u00a0',
  '\ufeffbom',
  'x=y;z,w\\back',
  'ÿ',
  'k'.repeat(255),
];

/** Aggregate ids that tx-outbox 0.1 accepted too (printable ASCII, no space at either end). */
export const PREVIOUS_IDS: readonly string[] = ['50%off', '%41%42', 'a%20b', 'a"quoted"id', 'plain-1'];

/** The envelope headers tx-outbox 0.1 sent on every transport. */
export function previousEnvelopeHeaders(message: OutboxMessage, source: string): Record<string, string> {
  const headers: Record<string, string> = { ...message.headers };
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
