/**
 * Reading an envelope back, whatever wrote it: every binding tx-outbox writes (bindings.ts)
 * and what earlier versions wrote (`ce-*` names, values as they are, on every transport), so a
 * rolling upgrade with both on the wire reads the same. The form is told by the id's name:
 * `ce_id` Kafka, `cloudEvents:id` / `cloudEvents_id` AMQP, `ce-id` HTTP and NATS (their values
 * are percent-encoded when `ce-aggregatesequence` is present, which earlier versions never
 * sent), `id` MQTT 5 and Redis.
 */
import { OutboxValidationError } from '../errors.js';
import { HEADERS_ATTRIBUTE, KNOWN_ATTRIBUTES } from './attributes.js';
import { percentDecode } from './percent.js';

/** How a message's envelope was written. */
export type EnvelopeForm = 'ce-encoded' | 'ce' | 'kafka' | 'amqp' | 'unprefixed';

/** An envelope read from a message's headers. */
export interface ReadEnvelope {
  readonly form: EnvelopeForm;
  /** Every CloudEvents attribute found, by its name (`id`, `aggregateid` …), decoded. */
  readonly attributes: Readonly<Record<string, string>>;
  /** The header each attribute was read from, for errors. */
  readonly headerOf: Readonly<Record<string, string>>;
  /** The other headers, as they arrived (`traceparent`, the user's own, `content-type` …). */
  readonly headers: Readonly<Record<string, string>>;
}

const PREFIXES: ReadonlyArray<readonly [string, EnvelopeForm]> = [
  ['ce_', 'kafka'],
  ['cloudevents:', 'amqp'],
  ['cloudevents_', 'amqp'],
  ['ce-', 'ce'],
];

function formOf(headers: Readonly<Record<string, string | undefined>>): {
  form: EnvelopeForm;
  prefix: string;
} {
  let unprefixed = false;
  for (const name in headers) {
    if (headers[name] === undefined) continue;
    const lower = name.toLowerCase();
    for (const [prefix, form] of PREFIXES) {
      if (lower === `${prefix}id`) {
        if (form !== 'ce') return { form, prefix };
        const encoded = Object.keys(headers).some((n) => n.toLowerCase() === 'ce-aggregatesequence');
        return { form: encoded ? 'ce-encoded' : 'ce', prefix };
      }
    }
    if (lower === 'id') unprefixed = true;
  }
  return { form: unprefixed ? 'unprefixed' : 'ce', prefix: unprefixed ? '' : 'ce-' };
}

/**
 * The attributes and other headers of a message's envelope. Throws an
 * `OutboxValidationError` naming the header whose value is not valid percent-encoding.
 */
export function readEnvelope(headers: Readonly<Record<string, string | undefined>>): ReadEnvelope {
  const { form, prefix } = formOf(headers);
  const attributes: Record<string, string> = {};
  const headerOf: Record<string, string> = {};
  const rest: Record<string, string> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined) continue;
    const lower = name.toLowerCase();
    let attribute: string | undefined;
    if (prefix === '') {
      if (KNOWN_ATTRIBUTES.has(lower)) attribute = lower;
    } else if (lower.startsWith(prefix)) {
      attribute = lower.slice(prefix.length);
    } else if (form === 'amqp' && (lower.startsWith('cloudevents:') || lower.startsWith('cloudevents_'))) {
      attribute = lower.slice(12);
    }
    if (attribute === undefined || attribute === '') {
      rest[name] = value;
      continue;
    }
    if (form === 'ce-encoded') {
      try {
        attributes[attribute] = percentDecode(value);
      } catch (error) {
        throw new OutboxValidationError(
          `headers.${name}`,
          `is not valid percent-encoding: ${(error as Error).message}`,
          'The message was not published by tx-outbox, or was altered on the way.',
        );
      }
    } else {
      attributes[attribute] = value;
    }
    headerOf[attribute] = name;
  }
  if (attributes['datacontenttype'] === undefined) {
    for (const name in rest) {
      if (name.toLowerCase() === 'content-type') {
        attributes['datacontenttype'] = rest[name]!;
        headerOf['datacontenttype'] = name;
        break;
      }
    }
  }
  if (form === 'unprefixed') unpackHeaders(rest);
  return { form, attributes, headerOf, headers: rest };
}

/**
 * A structured-mode event's `txoheaders` (structuredAttributes) back into the headers it
 * carries. Left as it is when it is not a JSON object of strings (another producer's).
 */
function unpackHeaders(headers: Record<string, string>): void {
  const packed = headers[HEADERS_ATTRIBUTE];
  if (packed === undefined) return;
  let parsed: unknown;
  try {
    parsed = JSON.parse(packed);
  } catch {
    return;
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return;
  const entries = Object.entries(parsed);
  if (!entries.every(([, value]) => typeof value === 'string')) return;
  delete headers[HEADERS_ATTRIBUTE];
  for (const [name, value] of entries) if (!(name in headers)) headers[name] = value as string;
}
