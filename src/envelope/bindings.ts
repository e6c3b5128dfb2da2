/**
 * The envelope as each transport's CloudEvents protocol binding names and encodes it (binary
 * content mode): the message's own headers first, then every attribute.
 *
 * | binding | attribute names        | values          | datacontenttype            |
 * |---------|------------------------|-----------------|----------------------------|
 * | http    | `ce-<name>`            | percent-encoded | `content-type` header only |
 * | nats    | `ce-<name>`            | percent-encoded | `ce-datacontenttype`       |
 * | kafka   | `ce_<name>`            | UTF-8, as is    | `content-type` header      |
 * | amqp    | `cloudEvents_<name>`   | UTF-8, as is    | the AMQP `content-type` property (set by the publisher) |
 * | mqtt    | `<name>`               | UTF-8, as is    | user property (and the PUBLISH Content Type, set by the publisher) |
 * | redis   | `<name>`               | UTF-8, as is    | field                      |
 *
 * Redis Streams has no official binding: its fields follow the MQTT 5 layout.
 */
import type { OutboxMessage } from '../core/message.js';
import {
  ATTRIBUTE_NAME,
  ATTRIBUTE_NAMES,
  type AttributeName,
  type AttributeNames,
  envelopeAttributes,
  HEADERS_ATTRIBUTE,
  KNOWN_ATTRIBUTES,
  OPTIONAL_ATTRIBUTE_NAMES,
  writeAttributes,
} from './attributes.js';
import { percentEncode } from './percent.js';

export type EnvelopeBinding = 'http' | 'nats' | 'kafka' | 'amqp' | 'mqtt' | 'redis';

interface BindingRule {
  readonly prefix: string;
  readonly encode: boolean;
  /** Where `datacontenttype` goes: as an attribute, as a `content-type` header, or nowhere (a message property). */
  readonly contentType: 'attribute' | 'header' | 'property';
}

export const BINDING_RULES: Readonly<Record<EnvelopeBinding, BindingRule>> = {
  http: { prefix: 'ce-', encode: true, contentType: 'header' },
  nats: { prefix: 'ce-', encode: true, contentType: 'attribute' },
  kafka: { prefix: 'ce_', encode: false, contentType: 'header' },
  amqp: { prefix: 'cloudEvents_', encode: false, contentType: 'property' },
  mqtt: { prefix: '', encode: false, contentType: 'attribute' },
  redis: { prefix: '', encode: false, contentType: 'attribute' },
};

/** Header names of each binding's attributes, built once. */
const NAMES = new Map<string, AttributeNames>();

function namesOf(prefix: string): AttributeNames {
  let names = NAMES.get(prefix);
  if (names === undefined) {
    const built: Partial<Record<AttributeName, string>> = {};
    for (const name of [...ATTRIBUTE_NAMES, ...OPTIONAL_ATTRIBUTE_NAMES]) {
      built[name] = prefix + name;
    }
    names = built as Record<AttributeName, string>;
    NAMES.set(prefix, names);
  }
  return names;
}

/** The header (or field, or user property) name of `attribute` under `binding`. */
export function attributeHeader(binding: EnvelopeBinding, attribute: AttributeName): string {
  return namesOf(BINDING_RULES[binding].prefix)[attribute];
}

/**
 * The headers a message carries on `binding`: its own headers (`traceparent` …), then the
 * CloudEvents attributes named and encoded as the binding says. Default binding `nats`: `ce-`
 * names with percent-encoded values, the generic binary form every reader of tx-outbox
 * (`fromEnvelope`) understands.
 */
export function envelopeHeaders(
  message: OutboxMessage,
  source: string,
  binding: EnvelopeBinding = 'nats',
): Record<string, string> {
  const rule = BINDING_RULES[binding];
  const headers: Record<string, string> = {};
  for (const name in message.headers) {
    // Unprefixed, a header named like an attribute in any case would pass for it: enqueue refuses
    // such names, a row of an earlier version may hold one (0.1 allowed `aggregatesequence`).
    if (rule.prefix === '' && KNOWN_ATTRIBUTES.has(name.toLowerCase())) continue;
    headers[name] = message.headers[name]!;
  }
  writeAttributes(
    headers,
    namesOf(rule.prefix),
    message,
    source,
    rule.encode ? percentEncode : undefined,
    rule.contentType === 'attribute',
  );
  if (rule.contentType === 'header') headers['content-type'] = message.contentType;
  return headers;
}

/** Attribute names a structured-mode event cannot take from a user header. */
const STRUCTURED_RESERVED: ReadonlySet<string> = new Set(['data', 'data_base64', HEADERS_ATTRIBUTE]);

/**
 * The attributes of a structured-mode event (MQTT 3.1.1, webhook batches): the message's own
 * headers whose names are attribute names as they are (`traceparent` …), then every attribute,
 * values as they are (JSON carries any string). The other headers (`x-tenant`, `TraceParent` …),
 * which a JSON event cannot hold as attributes, travel together in the `txoheaders` extension: a
 * JSON object of name → value, which `fromEnvelope` unpacks.
 */
export function structuredAttributes(message: OutboxMessage, source: string): Record<string, string> {
  const event: Record<string, string> = {};
  let others: Record<string, string> | undefined;
  for (const name in message.headers) {
    const value = message.headers[name]!;
    if (ATTRIBUTE_NAME.test(name) && !STRUCTURED_RESERVED.has(name)) {
      event[name] = value;
    } else {
      others ??= {};
      others[name] = value;
    }
  }
  Object.assign(event, envelopeAttributes(message, source));
  if (others !== undefined) event[HEADERS_ATTRIBUTE] = JSON.stringify(others);
  return event;
}
